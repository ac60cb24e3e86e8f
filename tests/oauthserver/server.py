"""A local OAuth-protected MCP server for tests, built on the MCP SDK's auth support.

Run from the repository root:

    python -m tests.oauthserver --port 0 [--auto-approve] [--token-lifetime 2] ...

It binds 127.0.0.1 only and prints ``READY http://127.0.0.1:<port>/mcp`` once it
accepts connections. One process is both the resource server (``/mcp``) and its
authorization server (issuer ``http://127.0.0.1:<port>``).

From the SDK (``MCPServer`` with ``auth_server_provider`` + ``AuthSettings``):
``/.well-known/oauth-protected-resource/mcp`` (RFC 9728), ``/authorize``,
``/token``, ``/register`` (RFC 7591), ``/revoke`` (RFC 7009), the bearer check on
``/mcp`` with its 401 + ``WWW-Authenticate``, and the RFC 8414 metadata document
(built by the SDK's ``build_metadata``; re-served here only to add the RFC 9207 and
CIMD flags). Written here: the in-memory provider (``provider.py``), the consent
page, the admin endpoints, the per-tool step-up 403 and RFC 9207 ``iss`` on the
SDK's own error redirects.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import construct_redirect_uri
from mcp.server.auth.routes import build_metadata, build_resource_metadata_url, cors_middleware
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.oauthserver.provider import InMemoryProvider, ServerOptions, same_resource

WRITE_TOOLS = frozenset({"write_note"})
MAX_PEEK_BYTES = 4 * 1024 * 1024


def build_app(options: ServerOptions) -> tuple[Starlette, InMemoryProvider]:
    provider = InMemoryProvider(options)
    notes: list[dict[str, Any]] = []

    auth = AuthSettings(
        issuer_url=options.issuer,  # type: ignore[arg-type]  # pydantic validates the string
        resource_server_url=options.resource,  # type: ignore[arg-type]
        required_scopes=options.required_scopes,
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=options.scopes, default_scopes=options.required_scopes
        ),
        revocation_options=RevocationOptions(enabled=True),
        validate_token_resource=True,
    )
    mcp = MCPServer(
        "oauth-test-server",
        version="1.0.0",
        instructions="An OAuth-protected MCP server for Patchbay's tests.",
        auth_server_provider=provider,
        auth=auth,
        log_level="WARNING",
    )

    @mcp.tool(
        description="Who is calling: the client id and scopes of the bearer token.",
        annotations=ToolAnnotations(title="Who am I", readOnlyHint=True, openWorldHint=False),
    )
    def whoami() -> dict[str, Any]:
        token = get_access_token()
        if token is None:  # the bearer check on /mcp makes this unreachable
            raise ToolError("no access token")
        return {
            "client_id": token.client_id,
            "scopes": token.scopes,
            "subject": token.subject,
            "resource": token.resource,
            "expires_at": token.expires_at,
        }

    @mcp.tool(
        description="Return the given text.",
        annotations=ToolAnnotations(title="Echo", readOnlyHint=True, openWorldHint=False),
    )
    def echo(text: str) -> str:
        return text

    @mcp.tool(
        description=f"Store a note. Needs the {options.write_scope} scope.",
        annotations=ToolAnnotations(
            title="Write a note", readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False
        ),
    )
    def write_note(text: str) -> dict[str, Any]:
        token = get_access_token()
        # StepUpMiddleware answers 403 before this runs; this is the backstop.
        if token is None or options.write_scope not in token.scopes:
            raise ToolError(f"insufficient_scope: {options.write_scope} required")
        note = {"id": len(notes) + 1, "text": text, "client_id": token.client_id}
        notes.append(note)
        return note

    @mcp.custom_route("/consent", methods=["GET"])
    async def consent_page(request: Request) -> Response:
        txn = request.query_params.get("txn", "")
        pending = provider.peek_pending(txn)
        if pending is None:
            return _html_error("Unknown or expired authorization request.")
        name = pending.client.client_name or pending.client.client_id
        scopes = pending.params.scopes if pending.params.scopes is not None else options.required_scopes
        return HTMLResponse(
            _CONSENT_PAGE.format(
                name=html.escape(name),
                client_id=html.escape(pending.client.client_id),
                resource=html.escape(pending.params.resource or options.resource),
                redirect_uri=html.escape(str(pending.params.redirect_uri)),
                scopes="\n".join(f"      <li>{html.escape(s)}</li>" for s in scopes),
                txn=html.escape(txn),
            ),
            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"},
        )

    @mcp.custom_route("/consent", methods=["POST"])
    async def consent_decision(request: Request) -> Response:
        form = await request.form()
        pending = provider.take_pending(str(form.get("txn", "")))
        if pending is None:
            return _html_error("Unknown or expired authorization request.")
        action = form.get("action")
        if action == "approve":
            url = provider.approve(pending.client, pending.params)
        elif action == "deny":
            url = provider.deny(pending.params)
        else:
            return _html_error("Choose Approve or Deny.")
        return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})

    @mcp.custom_route("/admin/state", methods=["GET"])
    async def admin_state(request: Request) -> Response:
        if not _from_loopback(request):
            return JSONResponse({"error": "forbidden"}, status_code=403)
        return JSONResponse({**provider.state(), "notes": notes})

    @mcp.custom_route("/admin/revoke-all", methods=["POST"])
    async def admin_revoke_all(request: Request) -> Response:
        if not _from_loopback(request):
            return JSONResponse({"error": "forbidden"}, status_code=403)
        return JSONResponse({"revoked": provider.revoke_all()})

    app = mcp.streamable_http_app(host="127.0.0.1")

    # The SDK builds RFC 8414 metadata without the RFC 9207 / CIMD flags (its handlers do
    # not emit `iss` nor resolve URL client ids); serve its document with them added, ahead
    # of the SDK's own route for the same path.
    metadata = build_metadata(
        auth.issuer_url,
        None,
        auth.client_registration_options or ClientRegistrationOptions(),
        auth.revocation_options or RevocationOptions(),
    )
    # The SDK's ClientAuthenticator accepts public clients (`none`), which CIMD clients are.
    metadata.token_endpoint_auth_methods_supported = ["client_secret_post", "client_secret_basic", "none"]
    if options.iss:
        metadata.authorization_response_iss_parameter_supported = True
    if options.cimd:
        metadata.client_id_metadata_document_supported = True
    metadata_body = metadata.model_dump_json(exclude_none=True)

    async def as_metadata(request: Request) -> Response:
        return Response(metadata_body, media_type="application/json", headers={"Cache-Control": "public, max-age=3600"})

    app.router.routes.insert(
        0,
        Route(
            "/.well-known/oauth-authorization-server",
            endpoint=cors_middleware(as_metadata, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
    )
    app.add_middleware(PeekMiddleware, provider=provider, options=options)
    return app, provider


class PeekMiddleware:
    """Outermost ASGI layer; looks at requests the SDK's handlers do not expose.

    * ``POST /mcp`` carrying ``tools/call`` of a write tool, with a valid token lacking the
      write scope: HTTP 403 + ``WWW-Authenticate: Bearer error="insufficient_scope", scope=…``
      (MCP step-up). The SDK only checks one scope set for the whole endpoint.
    * ``/authorize``: records the raw request parameters for ``/admin/state`` (the SDK hands
      the provider validated parameters only, without e.g. ``code_challenge_method``), and
      adds RFC 9207 ``iss`` to the error redirects the SDK's handler builds itself.
    """

    def __init__(self, app: ASGIApp, provider: InMemoryProvider, options: ServerOptions) -> None:
        self.app = app
        self.provider = provider
        self.options = options
        self.resource_metadata_url = str(build_resource_metadata_url(AnyHttpUrl(options.resource)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == "/authorize":
            if method == "POST":
                body, receive = await _buffer_body(receive)
                params = dict(parse_qsl(body.decode("latin-1"), keep_blank_values=True))
            else:
                params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
            # absent parameters read as null, so tests can assert e.g. that no `resource` was sent
            self.provider.last_authorize = {
                "http_method": method,
                **dict.fromkeys(("client_id", "redirect_uri", "scope", "resource", "code_challenge_method", "state")),
                **params,
            }
            if self.options.iss:
                send = self._with_iss_on_error_redirects(send)
        elif path == "/revoke" and method == "POST":
            # The SDK's revocation request model declares `client_secret: str | None` without a
            # default, so a public client's request (RFC 7009: no secret) fails validation
            # with 400. Fill in the absent field so public clients can revoke, as the RFC says.
            body, _ = await _buffer_body(receive)
            params = parse_qsl(body.decode("latin-1"), keep_blank_values=True)
            if "client_secret" not in dict(params):
                body = urlencode([*params, ("client_secret", "")]).encode()
            receive = _replaying(body)
        elif path == "/mcp" and method == "POST":
            body, receive = await _buffer_body(receive)
            if _calls_tool(body, WRITE_TOOLS) and await self._lacks_write_scope(scope):
                await self._insufficient_scope(send)
                return
        await self.app(scope, receive, send)

    async def _lacks_write_scope(self, scope: Scope) -> bool:
        token = _bearer(scope)
        if token is None:
            return False
        access = await self.provider.load_access_token(token)
        if access is None or not same_resource(access.resource or "", self.options.resource):
            return False  # not a usable token: the SDK's bearer check answers 401
        return self.options.write_scope not in access.scopes

    async def _insufficient_scope(self, send: Send) -> None:
        needed = list(dict.fromkeys([*self.options.required_scopes, self.options.write_scope]))
        description = f"This tool requires the {self.options.write_scope} scope"
        challenge = (
            f'Bearer error="insufficient_scope", scope="{" ".join(needed)}", '
            f'resource_metadata="{self.resource_metadata_url}", error_description="{description}"'
        )
        body = json.dumps({"error": "insufficient_scope", "error_description": description}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", challenge.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _with_iss_on_error_redirects(self, send: Send) -> Send:
        issuer = self.options.issuer

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (302, 303):
                headers = []
                for name, value in message.get("headers", []):
                    if name.lower() == b"location":
                        location = value.decode("latin-1")
                        query = dict(parse_qsl(urlparse(location).query))
                        if "error" in query and "iss" not in query:
                            value = construct_redirect_uri(location, iss=issuer).encode("latin-1")
                    headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        return wrapped


def _replaying(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def _buffer_body(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole request body, and return a `receive` that replays it."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # disconnect
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False) and size <= MAX_PEEK_BYTES
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return body, replay


def _calls_tool(body: bytes, names: frozenset[str]) -> bool:
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    messages = payload if isinstance(payload, list) else [payload]
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            if isinstance(params, dict) and params.get("name") in names:
                return True
    return False


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            header = value.decode("latin-1")
            if header.lower().startswith("bearer "):
                return header[7:].strip()
    return None


def _from_loopback(request: Request) -> bool:
    return request.client is None or request.client.host in ("127.0.0.1", "::1", "localhost")


def _html_error(text: str) -> HTMLResponse:
    page = f'<!doctype html><html><head><meta charset="utf-8"><title>Error</title></head><body><p>{html.escape(text)}</p></body></html>'
    return HTMLResponse(page, status_code=400, headers={"Cache-Control": "no-store"})


_CONSENT_PAGE = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>Authorize {name}</title>
  </head>
  <body>
    <h1>Authorize {name}</h1>
    <p><strong>{name}</strong> (client <code>{client_id}</code>) asks for access to <code>{resource}</code>.</p>
    <p>Requested scopes:</p>
    <ul id="scopes">
{scopes}
    </ul>
    <p>You will be sent back to <code>{redirect_uri}</code>.</p>
    <form method="post" action="/consent">
      <input type="hidden" name="txn" value="{txn}">
      <button type="submit" name="action" value="approve">Approve</button>
      <button type="submit" name="action" value="deny">Deny</button>
    </form>
  </body>
</html>
"""


def parse_args(argv: Sequence[str] | None = None) -> ServerOptions:
    parser = argparse.ArgumentParser(prog="python -m tests.oauthserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1; 0 picks a free one (default)")
    parser.add_argument(
        "--scopes", default="mcp:read mcp:write", help='supported scopes (default "mcp:read mcp:write")'
    )
    parser.add_argument(
        "--required-scopes", default="mcp:read", help='scopes every /mcp request needs (default "mcp:read")'
    )
    parser.add_argument("--write-scope", default="mcp:write", help="scope write_note needs (default mcp:write)")
    parser.add_argument("--token-lifetime", type=int, default=3600, help="access token lifetime, seconds")
    parser.add_argument(
        "--refresh-token-lifetime", type=int, default=0, help="refresh token lifetime, seconds; 0 = no expiry"
    )
    parser.add_argument("--auto-approve", action="store_true", help="skip the consent page")
    parser.add_argument("--cimd", action="store_true", help="accept Client ID Metadata Document URLs as client ids")
    parser.add_argument("--no-iss", action="store_true", help="leave out the RFC 9207 iss parameter")
    args = parser.parse_args(argv)
    scopes = args.scopes.split()
    required = args.required_scopes.split()
    for scope in [*required, args.write_scope]:
        if scope not in scopes:
            parser.error(f"scope {scope!r} is not in --scopes")
    return ServerOptions(
        port=args.port,
        scopes=scopes,
        required_scopes=required,
        write_scope=args.write_scope,
        token_lifetime=args.token_lifetime,
        refresh_token_lifetime=args.refresh_token_lifetime or None,
        auto_approve=args.auto_approve,
        cimd=args.cimd,
        iss=not args.no_iss,
    )


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", options.port))
    options.port = sock.getsockname()[1]
    app, _ = build_app(options)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, access_log=False)
    )
    asyncio.run(_serve(server, sock, lambda: print(f"READY {options.resource}", flush=True)))


async def _serve(server: uvicorn.Server, sock: socket.socket, ready: Callable[[], None]) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # raises the startup error
            sys.exit(1)
        await asyncio.sleep(0.01)
    ready()
    await task


__all__ = ["build_app", "main", "parse_args"]
