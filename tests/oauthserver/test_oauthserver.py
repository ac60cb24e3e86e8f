"""The test OAuth MCP server, driven by the MCP SDK's own OAuth client (no database)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlparse

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth.oauth2 import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from tests.helpers import REPO, stop_process
from tests.oauthserver.server import parse_args

T = TypeVar("T")
MODERN = "2026-07-28"
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never contacted: the handlers read the Location header


# --- the server subprocess ----------------------------------------------------------------


@dataclass
class RunningServer:
    url: str
    proc: subprocess.Popen[str]

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def state(self) -> dict[str, Any]:
        return httpx2.get(f"{self.base}/admin/state").json()


def launch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.oauthserver", "--port", "0", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str], timeout: float = 60) -> RunningServer:
    assert proc.stdout is not None
    watchdog = threading.Timer(timeout, proc.kill)  # a hung startup ends readline() with EOF
    watchdog.start()
    try:
        line = proc.stdout.readline().strip()
    finally:
        watchdog.cancel()
    match = re.fullmatch(r"READY (http://127\.0\.0\.1:\d+/mcp)", line)
    assert match, f"server did not start: {line!r}, exit code {proc.poll()}"
    return RunningServer(match.group(1), proc)


def stop(proc: subprocess.Popen[str]) -> None:
    stop_process(proc, timeout=5)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RunningServer]]:
    """The three servers the tests use, started side by side (imports dominate startup)."""
    procs = {
        "auto": launch("--auto-approve"),
        "consent": launch("--cimd"),
        "short": launch("--auto-approve", "--token-lifetime", "2"),
    }
    try:
        yield {name: wait_ready(proc) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            stop(proc)


@pytest.fixture
def auto(servers: dict[str, RunningServer]) -> RunningServer:
    """`--auto-approve`; shared by several tests, so they compare counters before/after."""
    return servers["auto"]


@pytest.fixture
def consent(servers: dict[str, RunningServer]) -> RunningServer:
    """Consent page on, `--cimd`."""
    return servers["consent"]


@pytest.fixture
def short(servers: dict[str, RunningServer]) -> RunningServer:
    """`--auto-approve --token-lifetime 2`; only the refresh test uses it."""
    return servers["short"]


# --- the SDK client side ------------------------------------------------------------------


@dataclass
class MemoryStorage:
    """`mcp.client.auth.TokenStorage` in memory."""

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class HeadlessBrowser:
    """Plays the user agent against an `--auto-approve` server: GETs the authorization URL
    and keeps the redirect it answers with."""

    authorization_urls: list[str] = field(default_factory=list)
    location: str | None = None

    async def redirect_handler(self, url: str) -> None:
        self.authorization_urls.append(url)
        async with httpx2.AsyncClient() as http:
            response = await http.get(url)
        assert response.status_code == 302, response.text
        self.location = response.headers["location"]

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.location is not None
        query = {k: v[0] for k, v in parse_qs(urlparse(self.location).query).items()}
        assert "error" not in query, query
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


@dataclass
class SdkClient:
    storage: MemoryStorage
    browser: HeadlessBrowser
    auth: OAuthClientProvider


def sdk_client(server: RunningServer) -> SdkClient:
    storage = MemoryStorage()
    browser = HeadlessBrowser()
    auth = OAuthClientProvider(
        server_url=server.url,
        client_metadata=OAuthClientMetadata(
            client_name="Patchbay test client",
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    return SdkClient(storage, browser, auth)


async def _with_client(server: RunningServer, sdk: SdkClient, body: Callable[[Client], Awaitable[T]]) -> T:
    async with (
        httpx2.AsyncClient(auth=sdk.auth, timeout=10) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        return await body(client)


def run(server: RunningServer, sdk: SdkClient, body: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        with anyio.fail_after(20):
            return await _with_client(server, sdk, body)

    return anyio.run(main)


async def whoami(client: Client) -> dict[str, Any]:
    result = await client.call_tool("whoami", {})
    assert not result.is_error, result
    assert result.structured_content is not None
    return result.structured_content


def raw_call(server: RunningServer, token: str, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
    """A bare, stateless (2026-07-28) JSON-RPC tools/call, to see the HTTP status the auth layer answers with."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return httpx2.post(
        server.url,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta},
        },
    )


# --- manual OAuth, for the consent page and the edges --------------------------------------


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(server: RunningServer, name: str = "Manual Client", **extra: Any) -> dict[str, Any]:
    response = httpx2.post(
        f"{server.base}/register",
        json={"client_name": name, "redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "client_secret_post"}
        | extra,
    )
    assert response.status_code == 201, response.text
    return response.json()


def authorize_url(server: RunningServer, client_id: str, challenge: str, **params: str) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "xyz",
        "scope": "mcp:read",
        "resource": server.url,
    } | params
    return f"{server.base}/authorize?{urlencode(query)}"


def redirect_query(response: httpx2.Response) -> dict[str, str]:
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(REDIRECT_URI), location
    return {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}


def consent_form(page: str) -> dict[str, str]:
    txn = re.search(r'name="txn" value="([^"]+)"', page)
    assert txn, page
    return {"txn": txn.group(1)}


# --- tests ---------------------------------------------------------------------------------


def test_metadata_and_the_401_challenge(auto: RunningServer) -> None:
    asm = httpx2.get(f"{auto.base}/.well-known/oauth-authorization-server").json()
    assert asm["issuer"] == f"{auto.base}/"
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert asm["registration_endpoint"] == f"{auto.base}/register"
    assert asm["revocation_endpoint"] == f"{auto.base}/revoke"
    assert asm["scopes_supported"] == ["mcp:read", "mcp:write"]
    assert asm["authorization_response_iss_parameter_supported"] is True
    assert "client_id_metadata_document_supported" not in asm

    prm = httpx2.get(f"{auto.base}/.well-known/oauth-protected-resource/mcp").json()
    assert prm["resource"] == auto.url
    assert prm["authorization_servers"] == [f"{auto.base}/"]

    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = httpx2.post(auto.url, headers=headers, json={})
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert f'resource_metadata="{auto.base}/.well-known/oauth-protected-resource/mcp"' in challenge


def test_sdk_client_registers_authorizes_and_calls_tools(auto: RunningServer) -> None:
    sdk = sdk_client(auto)
    before = auto.state()

    async def body(client: Client) -> tuple[list[Any], dict[str, Any], str]:
        tools = (await client.list_tools()).tools
        echoed = await client.call_tool("echo", {"text": "hello"})
        return tools, await whoami(client), echoed.content[0].text  # type: ignore[union-attr]

    tools, me, echoed = run(auto, sdk, body)

    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {"whoami", "echo", "write_note"}
    assert by_name["whoami"].annotations.read_only_hint is True
    assert by_name["echo"].annotations.read_only_hint is True
    assert by_name["write_note"].annotations.destructive_hint is True
    assert by_name["write_note"].annotations.read_only_hint is False
    assert echoed == "hello"

    assert sdk.storage.client_info is not None
    assert me["client_id"] == sdk.storage.client_info.client_id
    assert me["scopes"] == ["mcp:read"]  # what the PRM's scopes_supported asked for
    assert me["resource"] == auto.url

    after = auto.state()
    assert after["clients_registered"] == before["clients_registered"] + 1
    assert after["tokens_issued"] == before["tokens_issued"] + 1
    last = after["last_authorize"]
    assert last["client_id"] == sdk.storage.client_info.client_id
    assert last["resource"] == auto.url
    assert last["scope"] == "mcp:read"
    assert last["code_challenge_method"] == "S256"
    # the SDK client validated the RFC 9207 iss it got back
    assert sdk.browser.location is not None
    assert parse_qs(urlparse(sdk.browser.location).query)["iss"] == [f"{auto.base}/"]


def test_access_token_is_refreshed_and_the_refresh_token_rotated(short: RunningServer) -> None:
    server = short
    sdk = sdk_client(server)

    async def body(client: Client) -> tuple[dict[str, Any], dict[str, Any], str, str]:
        first = await whoami(client)
        assert sdk.storage.tokens is not None and sdk.storage.tokens.refresh_token
        old_refresh = sdk.storage.tokens.refresh_token
        old_access = sdk.storage.tokens.access_token
        await anyio.sleep(2.2)
        second = await whoami(client)
        return first, second, old_refresh, old_access

    first, second, old_refresh, old_access = run(server, sdk, body)
    assert first["client_id"] == second["client_id"]
    state = server.state()
    assert state["refreshes"] >= 1
    assert state["tokens_issued"] == 1 + state["refreshes"]
    assert state["clients_registered"] == 1  # refreshed, not re-registered

    assert sdk.storage.tokens is not None
    assert sdk.storage.tokens.refresh_token != old_refresh
    assert sdk.storage.tokens.access_token != old_access
    client_info = sdk.storage.client_info
    assert client_info is not None and client_info.client_secret
    reused = httpx2.post(
        f"{server.base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": old_refresh,
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert reused.status_code == 400
    assert reused.json()["error"] == "invalid_grant"


def test_revoke_all_gives_401_and_the_sdk_client_reauthorizes(auto: RunningServer) -> None:
    sdk = sdk_client(auto)
    run(auto, sdk, whoami)
    assert sdk.storage.tokens is not None
    old = sdk.storage.tokens.access_token
    assert raw_call(auto, old, "echo", {"text": "x"}).status_code == 200

    revoked = httpx2.post(f"{auto.base}/admin/revoke-all").json()
    assert revoked["revoked"] >= 2
    response = raw_call(auto, old, "echo", {"text": "x"})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    state = auto.state()
    assert state["active_access_tokens"] == 0 and state["active_refresh_tokens"] == 0
    assert state["revoke_all_calls"] >= 1

    me = run(auto, sdk, whoami)  # 401 -> refresh fails -> full authorization again
    assert sdk.storage.tokens is not None and sdk.storage.tokens.access_token != old
    assert len(sdk.browser.authorization_urls) == 2
    assert me["client_id"] == sdk.storage.client_info.client_id  # type: ignore[union-attr]


def test_rfc7009_revocation_drops_the_pair(auto: RunningServer) -> None:
    sdk = sdk_client(auto)
    run(auto, sdk, whoami)
    tokens, client_info = sdk.storage.tokens, sdk.storage.client_info
    assert tokens is not None and client_info is not None
    before = auto.state()["revocations"]
    response = httpx2.post(
        f"{auto.base}/revoke",
        data={
            "token": tokens.access_token,
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert response.status_code == 200
    assert raw_call(auto, tokens.access_token, "echo", {"text": "x"}).status_code == 401
    assert auto.state()["revocations"] == before + 2  # the access token and its refresh token
    refreshed = httpx2.post(
        f"{auto.base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "client_id": client_info.client_id,
            "client_secret": client_info.client_secret,
        },
    )
    assert refreshed.json()["error"] == "invalid_grant"


def test_write_note_needs_the_write_scope_step_up(auto: RunningServer) -> None:
    sdk = sdk_client(auto)
    run(auto, sdk, whoami)
    assert sdk.storage.tokens is not None
    read_only = sdk.storage.tokens.access_token

    response = raw_call(auto, read_only, "write_note", {"text": "hi"})
    assert response.status_code == 403
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert 'scope="mcp:read mcp:write"' in challenge
    assert f'resource_metadata="{auto.base}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert raw_call(auto, read_only, "echo", {"text": "still fine"}).status_code == 200

    async def body(client: Client) -> tuple[Any, dict[str, Any]]:
        note = await client.call_tool("write_note", {"text": "stepped up"})
        return note, await whoami(client)

    note, me = run(auto, sdk, body)  # the SDK answers the 403 by re-authorizing with the union of scopes
    assert not note.is_error, note
    assert note.structured_content["text"] == "stepped up"
    assert me["scopes"] == ["mcp:read", "mcp:write"]
    state = auto.state()
    assert state["last_authorize"]["scope"] == "mcp:read mcp:write"
    assert any(n["text"] == "stepped up" for n in state["notes"])


def test_consent_page_approve_and_deny(consent: RunningServer) -> None:
    client = register(consent, name="Consent <Tester>")
    verifier, challenge = pkce()
    with httpx2.Client(follow_redirects=True) as http:
        page = http.get(authorize_url(consent, client["client_id"], challenge, scope="mcp:read mcp:write"))
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    html = page.text
    assert "<title>Authorize Consent &lt;Tester&gt;</title>" in html
    assert re.search(r'<form method="post" action="/consent">', html)
    assert '<button type="submit" name="action" value="approve">Approve</button>' in html
    assert '<button type="submit" name="action" value="deny">Deny</button>' in html
    assert "<li>mcp:read</li>" in html and "<li>mcp:write</li>" in html

    approved = redirect_query(httpx2.post(f"{consent.base}/consent", data=consent_form(html) | {"action": "approve"}))
    assert approved["state"] == "xyz"
    assert approved["iss"] == f"{consent.base}/"
    token = httpx2.post(
        f"{consent.base}/token",
        data={
            "grant_type": "authorization_code",
            "code": approved["code"],
            "redirect_uri": REDIRECT_URI,
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
            "code_verifier": verifier,
            "resource": consent.url,
        },
    )
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "mcp:read mcp:write"
    assert token.json()["expires_in"] == 3600
    assert raw_call(consent, token.json()["access_token"], "write_note", {"text": "ok"}).status_code == 200

    # the form cannot be replayed
    replay = httpx2.post(f"{consent.base}/consent", data=consent_form(html) | {"action": "approve"})
    assert replay.status_code == 400

    _, challenge = pkce()
    page = httpx2.get(authorize_url(consent, client["client_id"], challenge), follow_redirects=True).text
    denied = redirect_query(httpx2.post(f"{consent.base}/consent", data=consent_form(page) | {"action": "deny"}))
    assert denied["error"] == "access_denied"
    assert denied["state"] == "xyz"
    assert "code" not in denied
    assert consent.state()["consents_denied"] >= 1


def test_authorize_requires_s256_and_checks_the_resource(consent: RunningServer) -> None:
    client = register(consent)
    _, challenge = pkce()

    plain = redirect_query(
        httpx2.get(authorize_url(consent, client["client_id"], challenge, code_challenge_method="plain"))
    )
    assert plain["error"] == "invalid_request"
    assert plain["iss"] == f"{consent.base}/"  # added to the SDK's own error redirect
    assert consent.state()["last_authorize"]["code_challenge_method"] == "plain"

    query = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT_URI,
        "state": "s",
    }
    missing = redirect_query(httpx2.get(f"{consent.base}/authorize?{urlencode(query)}"))
    assert missing["error"] == "invalid_request"
    assert "code_challenge" in missing["error_description"]
    assert consent.state()["last_authorize"]["resource"] is None

    other = redirect_query(
        httpx2.get(authorize_url(consent, client["client_id"], challenge, resource="http://127.0.0.1:1/elsewhere"))
    )
    assert other["error"] == "invalid_target"
    assert consent.state()["last_authorize"]["resource"] == "http://127.0.0.1:1/elsewhere"

    unknown_scope = redirect_query(httpx2.get(authorize_url(consent, client["client_id"], challenge, scope="admin")))
    assert unknown_scope["error"] == "invalid_scope"


class _DocumentHandler(BaseHTTPRequestHandler):
    document: bytes = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.document)))
        self.end_headers()
        self.wfile.write(self.document)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_cimd_url_client_ids(consent: RunningServer) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _DocumentHandler)
    client_id = f"http://127.0.0.1:{httpd.server_address[1]}/client.json"
    _DocumentHandler.document = json.dumps(
        {
            "client_id": client_id,
            "client_name": "Metadata Document Client",
            "redirect_uris": [REDIRECT_URI],
            "token_endpoint_auth_method": "none",
        }
    ).encode()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        server = consent
        asm = httpx2.get(f"{server.base}/.well-known/oauth-authorization-server").json()
        assert asm["client_id_metadata_document_supported"] is True
        assert "none" in asm["token_endpoint_auth_methods_supported"]

        verifier, challenge = pkce()
        page = httpx2.get(authorize_url(server, client_id, challenge), follow_redirects=True)
        assert "<title>Authorize Metadata Document Client</title>" in page.text
        code = redirect_query(
            httpx2.post(f"{server.base}/consent", data=consent_form(page.text) | {"action": "approve"})
        )
        token = httpx2.post(
            f"{server.base}/token",
            data={
                "grant_type": "authorization_code",
                "code": code["code"],
                "redirect_uri": REDIRECT_URI,
                "client_id": client_id,
                "code_verifier": verifier,
            },
        )
        assert token.status_code == 200, token.text
        assert server.state()["cimd_clients"] == 1
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_options_are_validated(capsys: pytest.CaptureFixture[str]) -> None:
    options = parse_args(
        [
            "--port",
            "0",
            "--auto-approve",
            "--token-lifetime",
            "2",
            "--scopes",
            "a b",
            "--required-scopes",
            "a",
            "--write-scope",
            "b",
        ]
    )
    assert (options.scopes, options.required_scopes, options.token_lifetime, options.auto_approve) == (
        ["a", "b"],
        ["a"],
        2,
        True,
    )
    with pytest.raises(SystemExit) as exc:
        parse_args(["--scopes", "a b", "--required-scopes", "c"])
    assert exc.value.code == 2
    assert "scope 'c' is not in --scopes" in capsys.readouterr().err
