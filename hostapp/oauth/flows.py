"""Connect and Disconnect: a person authorizes the host at a server's authorization server.

Connect runs the SDK's whole flow (`HostOAuth` in interactive mode) on a thread of the web
process, through a real MCP handshake with the server: the first request is refused
(401), the provider discovers the authorization server, registers the host when it has
to, and calls the redirect handler with the authorization URL. That handler records the
URL on the `AuthorizationFlow` row; the view sends the browser there. The callback view
(any web process) writes the code onto the row by its `state`; the callback handler,
polling the row, hands it to the provider, which exchanges it for tokens and retries the
handshake with them. Then every process's pool reconnects with the new credentials.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import threading
import time
import uuid
from contextlib import AsyncExitStack
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx2
from django.db import connection, transaction
from django.utils import timezone
from mcp.client.auth.exceptions import OAuthFlowError
from mcp.client.auth.utils import union_scopes
from mcp.shared.auth import AuthorizationCodeResult

from hostapp.catalog.models import Server
from hostapp.catalog.pool import runtime_config
from hostapp.catalog.refreshes import request_refresh
from hostapp.catalog.states import authorization_given
from hostapp.core.events import send_event_on_commit
from hostapp.mcp.connection import Connection
from hostapp.mcp.errors import McpFailure
from hostapp.mcp.oauth import HostOAuth

from .models import AuthorizationFlow, Credential
from .store import DatabaseStore, _db, client_metadata, client_metadata_url

logger = logging.getLogger(__name__)

# How long a person has at the authorization server before the flow gives up.
CONSENT_TIMEOUT = 600.0
# How long the Connect click waits for the authorization URL.
START_TIMEOUT = 30.0


class ConnectError(Exception):
    pass


def start(server: Server, user_id: int | None, redirect_uri: str) -> AuthorizationFlow:
    """Begin a Connect; returns the flow once it has an authorization URL (or an end)."""
    if server.transport == Server.STDIO:
        raise ConnectError("only HTTP servers use OAuth")
    flow = AuthorizationFlow.objects.create(
        server=server, key=uuid.uuid4().hex, redirect_uri=redirect_uri, started_by_id=user_id
    )
    ready = threading.Event()
    thread = threading.Thread(target=_run, args=(flow.pk, ready), name=f"oauth-connect-{server.name}", daemon=True)
    thread.start()
    ready.wait(START_TIMEOUT)
    flow.refresh_from_db()
    if flow.status == AuthorizationFlow.STARTING:
        _finish(flow.pk, AuthorizationFlow.FAILED, "the server did not start an authorization in time")
        flow.refresh_from_db()
    return flow


def _run(flow_pk: int, ready: threading.Event) -> None:
    try:
        asyncio.run(_connect(flow_pk, ready))
    except Exception as exc:  # boundary: the thread reports on the row, never raises
        logger.exception("oauth connect failed")
        _finish(flow_pk, AuthorizationFlow.FAILED, _describe(exc))
    finally:
        ready.set()
        connection.close()


def _describe(exc: BaseException) -> str:
    """What went wrong, for the page: the OAuth reason when there is one (a refused consent,
    a failed registration or token exchange) rather than the 401 it led to."""
    reason = _oauth_reason(exc, set())
    if reason:
        return reason
    if isinstance(exc, McpFailure):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _oauth_reason(exc: BaseException | None, seen: set[int]) -> str:
    if exc is None or id(exc) in seen:
        return ""
    seen.add(id(exc))
    if isinstance(exc, ConnectError | OAuthFlowError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if found := _oauth_reason(inner, seen):
                return found
    return _oauth_reason(exc.__cause__, seen) or _oauth_reason(exc.__context__, seen)


async def _connect(flow_pk: int, ready: threading.Event) -> None:
    def load() -> tuple[AuthorizationFlow, Server, str]:
        flow = AuthorizationFlow.objects.select_related("server").get(pk=flow_pk)
        credential = Credential.objects.filter(server=flow.server).first()
        return flow, flow.server, credential.required_scope if credential else ""

    flow, server, required_scope = await _db(load)
    config = await _db(lambda: runtime_config(server))
    wanted_scope = union_scopes(config.oauth_scope or None, required_scope or None)

    async def redirect_handler(authorization_url: str) -> None:
        url = _with_scope(authorization_url, wanted_scope)
        state = parse_qs(urlsplit(url).query).get("state", [""])[0]

        def write() -> None:
            AuthorizationFlow.objects.filter(pk=flow_pk).update(
                authorization_url=url, state=state, status=AuthorizationFlow.WAITING, updated_at=timezone.now()
            )

        await _db(write)
        ready.set()

    async def callback_handler() -> AuthorizationCodeResult:
        deadline = time.monotonic() + CONSENT_TIMEOUT
        while time.monotonic() < deadline:
            row = await _db(lambda: AuthorizationFlow.objects.get(pk=flow_pk))
            if row.status == AuthorizationFlow.RECEIVED:
                if row.error:
                    raise ConnectError(f"the authorization server refused: {row.error}")
                return AuthorizationCodeResult(code=row.code, state=row.state, iss=row.iss or None)
            if row.status in (AuthorizationFlow.DONE, AuthorizationFlow.FAILED):
                raise ConnectError(row.error or "the authorization was abandoned")
            await asyncio.sleep(0.25)
        raise ConnectError("nobody came back from the authorization server in time")

    store = DatabaseStore(server.name, redirect_uri=flow.redirect_uri, interactive=True, user_id=flow.started_by_id)
    auth = HostOAuth(
        config.url,
        client_metadata(flow.redirect_uri, config.oauth_scope),
        store,
        interactive=True,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url(),
    )
    # A person may take minutes at the consent page: the handshake waits for them.
    connection = Connection(dataclasses.replace(config, connect_timeout=CONSENT_TIMEOUT + 60), auth=auth)
    async with AsyncExitStack() as stack:
        await connection.open(stack)
    await _db(lambda: _connected(flow_pk))


def _with_scope(url: str, scope: str | None) -> str:
    """The authorization URL asking for `scope` too (a step-up's scopes, the configured ones)."""
    if not scope:
        return url
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    query["scope"] = union_scopes(query.get("scope"), scope) or scope
    return urlunsplit(parts._replace(query=urlencode(query)))


def _connected(flow_pk: int) -> None:
    with transaction.atomic():
        flow = AuthorizationFlow.objects.select_related("server").get(pk=flow_pk)
        credential, _ = Credential.objects.select_for_update().get_or_create(server=flow.server)
        flow.status, flow.error = AuthorizationFlow.DONE, ""
        flow.save(update_fields=["status", "error", "updated_at"])
        if credential.status != Credential.CONNECTED:
            return  # the server let the handshake through without asking for a token
        credential.stamp = secrets.token_hex(8)
        credential.save(update_fields=["stamp", "updated_at"])
        _credentials_changed(flow.server)
    request_refresh([flow.server.name], reason="connected")


def _credentials_changed(server: Server) -> None:
    """Every process's pool picks the new credentials up (it follows config_changed_at)."""
    Server.objects.filter(pk=server.pk).update(config_changed_at=timezone.now())
    # The pools reconnect on their own time; until one reports, the server is not waiting
    # for a person any more.
    authorization_given(server)
    send_event_on_commit("server.changed", {"names": [server.name]})


def _finish(flow_pk: int, status: str, error: str = "") -> None:
    AuthorizationFlow.objects.filter(pk=flow_pk).exclude(status=AuthorizationFlow.DONE).update(
        status=status, error=error[:2000], updated_at=timezone.now()
    )


def receive(state: str, user_id: int | None, code: str, iss: str, error: str) -> AuthorizationFlow | None:
    """The callback: hand the code to the waiting flow. None when no flow waits for it."""
    with transaction.atomic():
        flow = (
            AuthorizationFlow.objects.select_for_update()
            .filter(state=state, status=AuthorizationFlow.WAITING)
            .select_related("server")
            .first()
        )
        if flow is None or (flow.started_by_id is not None and flow.started_by_id != user_id):
            return None
        flow.code, flow.iss, flow.error = code, iss, error
        flow.status = AuthorizationFlow.RECEIVED
        flow.save(update_fields=["code", "iss", "error", "status", "updated_at"])
    return flow


def wait_for_end(flow: AuthorizationFlow, timeout: float = 30.0) -> AuthorizationFlow:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        flow.refresh_from_db()
        if flow.status in (AuthorizationFlow.DONE, AuthorizationFlow.FAILED):
            break
        time.sleep(0.2)
    return flow


def disconnect(server: Server) -> str:
    """Revoke the tokens at the authorization server (when it offers revocation) and forget
    them and the registration. Returns what happened, for the page."""
    credential = Credential.objects.filter(server=server).first()
    if credential is None or not (credential.tokens or credential.client_info):
        return "nothing to disconnect"
    revoked = _revoke(server, credential)
    with transaction.atomic():
        credential.tokens = None
        credential.client_info = None
        credential.scope = ""
        credential.expires_at = None
        credential.status = Credential.NONE
        credential.reason = ""
        credential.required_scope = ""
        credential.stamp = secrets.token_hex(8)
        credential.save()
        _credentials_changed(server)
    return revoked


def _revoke(server: Server, credential: Credential) -> str:
    endpoint = (credential.learned.get("oauth_metadata") or {}).get("revocation_endpoint")
    tokens = credential.tokens or {}
    if not endpoint:
        return "forgotten (the authorization server offers no revocation)"
    info = credential.client_info or {}
    client_id = server.oauth_client_id or info.get("client_id", "")
    secret = server.oauth_client_secret or info.get("client_secret") or ""
    failures = []
    with httpx2.Client(timeout=10.0) as http:
        for hint in ("refresh_token", "access_token"):
            token = tokens.get(hint)
            if not token:
                continue
            data = {"token": token, "token_type_hint": hint, "client_id": client_id}
            if secret:
                data["client_secret"] = secret
            try:
                response = http.post(endpoint, data=data)
            except httpx2.HTTPError as exc:
                failures.append(f"{hint}: {type(exc).__name__}")
                continue
            if response.status_code != 200:
                failures.append(f"{hint}: HTTP {response.status_code}")
    if failures:
        logger.warning("oauth: %s revocation incomplete: %s", server.name, ", ".join(failures))
        return "forgotten; revocation failed (" + ", ".join(failures) + ")"
    return "revoked and forgotten"
