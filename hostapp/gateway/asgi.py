"""The ASGI side of /mcp: Origin and bearer-token checks in front of the SDK's app."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from mcp.server.transport_security import TransportSecuritySettings

from hostapp.calls import inputs
from hostapp.core.events import CALLS_GROUP, CATALOG_GROUP

from .agent_view import AgentInfo
from .models import hash_token
from .notices import current_agent
from .resumption import RETRY_MS, RecentEvents
from .server import AGENT_SCOPE_KEY, Gateway
from .tokens import authenticate, current_agents

logger = logging.getLogger(__name__)

Scope = dict[str, Any]


def _hosts() -> list[str]:
    hosts = []
    for host in settings.ALLOWED_HOSTS:
        if host in ("*", ""):
            continue
        host = host.lstrip(".")
        hosts += [host, f"{host}:*"]
    return hosts


def allowed_origins() -> list[str]:
    origins = list(settings.PATCHBAY_MCP_ALLOWED_ORIGINS)
    for host in settings.ALLOWED_HOSTS:
        if host in ("*", ""):
            continue
        host = host.lstrip(".")
        origins += [f"http://{host}", f"https://{host}", f"http://{host}:*", f"https://{host}:*"]
    return origins


def origin_allowed(origin: str | None) -> bool:
    """An absent Origin is a non-browser client; a present one must be ours."""
    if not origin:
        return True
    for allowed in allowed_origins():
        if origin == allowed or (allowed.endswith(":*") and origin.startswith(allowed[:-2] + ":")):
            return True
    return False


async def _respond(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


# Token checks are cached briefly (by the token's hash): one database read per agent per
# few seconds, not per request. A revocation is heard at once (`token.changed`); without
# the channel layer it takes effect within this time.
TOKEN_CACHE_SECONDS = 5.0
_token_cache: dict[str, tuple[float, AgentInfo | None]] = {}


def _load_agent(token: str) -> AgentInfo | None:
    agent = authenticate(token)
    return agent.info if agent is not None else None


async def _agent_for(token: str) -> AgentInfo | None:
    """The token's agent: from the cache on the loop, else from the database in a thread."""
    key = hash_token(token)
    hit = _token_cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < TOKEN_CACHE_SECONDS:
        return hit[1]
    info = await sync_to_async(_load_agent, thread_sensitive=False)(token)
    if len(_token_cache) > 10_000:
        _token_cache.clear()
    _token_cache[key] = (time.monotonic(), info)
    return info


class GatewayApp:
    """Serves /mcp; started on the first request (daphne sends no lifespan events)."""

    def __init__(self) -> None:
        self.gateway = Gateway()
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=_hosts(), allowed_origins=allowed_origins()
        )
        self.app = self.gateway.server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=security,
            event_store=RecentEvents(),  # a 2025-era stream broken mid-call is resumed (resumption.py)
            retry_interval=RETRY_MS,
        )
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    async def _ensure_running(self) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="mcp-gateway")
        await self._ready.wait()

    async def _run(self) -> None:
        assert self._ready is not None
        async with self.gateway.server.session_manager.run():
            try:
                await self.gateway.catalog.get()  # in memory before the first call
            except Exception:  # boundary: the first call that needs it loads it, or says why
                logger.exception("the agents' endpoint could not load the catalog")
            self._ready.set()
            await self._follow_catalog()

    async def _follow_catalog(self) -> None:
        """Hear catalog changes and calls' moves (from any process) on the channel layer:
        tell the agents of the catalog, wake those that wait for a call."""
        delay = 1.0
        while True:
            layer = get_channel_layer()
            try:
                channel = await layer.new_channel()
                await layer.group_add(CATALOG_GROUP, channel)
                await layer.group_add(CALLS_GROUP, channel)
                delay = 1.0
                while True:
                    message = await layer.receive(channel)
                    # A batch of events (`hostapp.core.events`), acted on once per kind.
                    batch = message.get("events", ())
                    kinds = {event.get("kind") for event in batch}
                    if "call.changed" in kinds:
                        self.gateway.calls_moved(batch)
                    if "input.changed" in kinds:
                        inputs.heard(batch)
                    if "policy.changed" in kinds:
                        self.gateway.forget_routes()
                        await self.gateway.catalog_changed()  # a blocked tool is no longer listed
                    if "token.changed" in kinds:
                        _token_cache.clear()  # a revoked token is refused at once, not within the TTL
                        await self.gateway.views_changed(current_agents)  # an edited view is heard of
                    if kinds & {"catalog.changed", "server.changed"}:
                        await self.gateway.catalog_changed()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # boundary: without Redis, the cache's TTL and the waits' own checks catch up
                logger.warning("the agents' endpoint lost the channel layer (%s); retrying in %.0fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not origin_allowed(headers.get("origin")):
            await _respond(send, 403, {"error": "this Origin may not use the MCP endpoint"})
            return
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        agent = await _agent_for(token.strip()) if scheme.lower() == "bearer" else None
        if agent is None:
            await _respond(
                send,
                401,
                {"error": "a valid agent token is required: Authorization: Bearer <token>"},
                [(b"www-authenticate", b'Bearer realm="patchbay", error="invalid_token"')],
            )
            return
        await self._ensure_running()
        scope = dict(scope)
        scope[AGENT_SCOPE_KEY] = agent
        token = current_agent.set(agent)
        try:
            await self.app(scope, receive, send)
        finally:
            current_agent.reset(token)


def mcp_path(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path == "/mcp" or path.startswith("/mcp/")
