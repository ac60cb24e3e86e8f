"""One live connection to one MCP server, over the SDK's ``mcp.Client``.

A :class:`Connection` is entered and left by a single task (the pool's keeper): the SDK
client's task groups must be. Any task on the same event loop may call it meanwhile; the
SDK multiplexes concurrent requests over the one session.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, TypeAdapter, ValidationError

from . import errors
from .config import ServerConfig
from .errors import McpFailure
from .http import CallTrace, current_trace, make_http_client
from .stdio import StdioDiagnostics, child_environment, hardened_stdio

logger = logging.getLogger(__name__)

CLIENT_NAME = "patchbay"
CLIENT_VERSION = "0.1.0"

# A listing that never ends must not hang or exhaust the host.
MAX_LIST_PAGES = 1000
MAX_TOOLS = 20000
# Resources, resource templates or prompts of one server.
MAX_ITEMS = 20000

_UNKNOWN_TOOL_RE = re.compile(r"\b(unknown tool|tool\b.{0,80}\bnot found|no such tool|tool not found)", re.IGNORECASE)

ProgressFn = Callable[[float, float | None, str | None], Any]
LogFn = Callable[[dict[str, Any]], Any]
SampleFn = Callable[[types.CreateMessageRequestParams], Awaitable[Any]]
ElicitFn = Callable[["InputAsk"], Awaitable[dict[str, Any]]]

# The tool call this task runs (a 2026-07-28 server's request for input is answered inside
# the call's own task); CallWatch says how the others are found.
_current_flight: ContextVar[_Flight | None] = ContextVar("patchbay_call_flight", default=None)

NO_SAMPLING = (
    "sampling is not available through this host: it runs no model of its own, and passes a "
    "server's sampling request only to the agent whose call it is, when that agent's client "
    "declared sampling"
)
NO_INPUT = (
    "nobody can be asked for this input: the host passes a server's request for input only to "
    "the person or agent whose tool call it is (outside a tool call, only to a 2026-07-28 agent "
    "that answers its own rounds of input), and could not tell which call this request belongs to"
)

# The protocol's log levels, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(eq=False)
class CallWatch:
    """What the caller of a tool hears while the call runs: the server's progress, and its
    log messages at `log_level` or above (none when it is empty).

    `on_sample` answers a server's sampling request made during the call (None: refused).
    `on_elicit` answers its requests for input (elicitation; None: refused): it is given an
    `InputAsk` and returns the `ElicitResult` as plain data ({"action", "content"?}). The
    time it takes does not count against the call's timeout: a person is answering.

    A server's `notifications/message`, and a 2025-era server's request, names no call. Such
    a message or request is taken as the call's only while it is the only one in flight on
    the connection: with two, it could be either's, and passing it on could tell one caller
    of another's call (a request is then refused; a 2026-07-28 server's requests come
    within the call itself, and are always the call's).
    """

    on_progress: ProgressFn | None = None
    on_log: LogFn | None = None
    log_level: str = ""
    on_sample: SampleFn | None = None
    on_elicit: ElicitFn | None = None

    def hears(self, level: str) -> bool:
        if self.on_log is None or self.log_level not in LOG_LEVELS:
            return False
        return level in LOG_LEVELS and LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)


@dataclass(frozen=True)
class InputAsk:
    """A server's request for input during a call, as plain data: `params` are the
    `ElicitRequestParams` on the wire ({"mode"?, "message", "requestedSchema" | "url",
    "elicitationId"?}); `key` names it in a 2026-07-28 `inputRequests` ("" in 2025)."""

    server: str
    params: dict[str, Any]
    era: str
    key: str = ""


@dataclass(frozen=True)
class Rounds:
    """A request whose rounds of input its caller drives (2026-07-28: a tool call, a prompt
    filled in, a resource read): the server's `input_required` result comes back as it is
    (plain data, `resultType` "input_required"), and the request made again carries the
    answers (`responses`: an `ElicitResult` (or, from an agent's client, a
    `CreateMessageResult`...) as plain data, by key) and the server's `state`, unchanged. A
    2025-era server's requests are answered during the call, through the watch, whatever
    this says."""

    responses: dict[str, dict[str, Any]] | None = None
    state: str | None = None


def input_required(result: dict[str, Any]) -> bool:
    """The result is a round of input requests (`Rounds`), not the call's answer."""
    return result.get("resultType") == "input_required"


class InputRefused(Exception):
    """Raised by an `on_elicit` that will not ask anyone (what the server asks for cannot be
    shown): the server is answered with this error (invalid params)."""


@dataclass(eq=False)
class _Flight:
    """A tool call in flight on a connection: its watch, and the clock of its timeout, which
    stops while a person is asked for input (`asking`)."""

    watch: CallWatch | None
    scope: anyio.CancelScope | None = None
    remaining: float = 0.0
    asking: int = 0
    # The scopes of its requests for input still being answered (cancelled when it ends).
    asks: set[anyio.CancelScope] = field(default_factory=set)
    quiet: anyio.Event = field(default_factory=anyio.Event)

    def pause(self) -> None:
        if self.asking == 0 and self.scope is not None:
            self.remaining = max(0.0, self.scope.deadline - anyio.current_time())
            self.scope.deadline = math.inf
        self.asking += 1

    def resume(self) -> None:
        self.asking -= 1
        if self.asking == 0 and self.scope is not None:
            self.scope.deadline = anyio.current_time() + self.remaining

    async def settle(self) -> None:
        """The call ended: its requests for input still open are given up (their answerers
        clean up); wait a moment for them to."""
        for scope in list(self.asks):
            scope.cancel()
        if self.asks:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.quiet.wait()


async def _maybe_await(outcome: Any) -> None:
    if hasattr(outcome, "__await__"):
        await outcome


@dataclass
class ServerFacts:
    """What the handshake (or discovery) told us about the server."""

    protocol_version: str = ""
    era: str = ""  # "modern" or "legacy"
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""


def _dump(model: Any) -> dict[str, Any]:
    if model is None:
        return {}
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


@functools.cache
def _wire_keys(model_type: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(attribute, key on the wire) of each field of a model type."""
    return tuple(
        (name, info.serialization_alias or info.alias or name) for name, info in model_type.model_fields.items()
    )


def _dump_listed(model: BaseModel) -> dict[str, Any]:
    """`_dump(model)`, field by field, for the items of a listing (thousands of tools).

    A model's free-form JSON fields (a tool's schemas and `_meta`) were parsed from the
    wire moments ago and hold JSON values only; dumping them walks every node to copy it
    as it is, most of the time a listing takes in this process. They are taken as they
    are, and only nested models are dumped. A model with extra fields is dumped whole."""
    if model.model_extra:
        return _dump(model)
    out: dict[str, Any] = {}
    for name, key in _wire_keys(type(model)):
        value = getattr(model, name)
        if value is None:
            continue
        if isinstance(value, BaseModel):
            value = _dump(value)
        elif isinstance(value, list) and any(isinstance(item, BaseModel) for item in value):
            value = [_dump(item) if isinstance(item, BaseModel) else item for item in value]
        out[key] = value
    return out


def result_failure(result: dict[str, Any], tool: str, known_tools: set[str] | None = None) -> McpFailure | None:
    """Classify an ``isError`` result: an unknown tool (protocol) or a tool error."""
    if not result.get("isError"):
        return None
    texts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict) and c.get("type") == "text"]
    message = " ".join(t for t in texts if t).strip() or "the tool reported an error"
    if (known_tools is not None and tool not in known_tools) or _UNKNOWN_TOOL_RE.search(message):
        return errors.protocol_error(message, code=errors.INVALID_PARAMS, reason="unknown_tool")
    return errors.tool_error(message)


class Connection:
    """A connected client plus what a host needs around it."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_tools_changed: Callable[[], Awaitable[None]] | None = None,
        on_resource_updated: Callable[[str], Awaitable[None]] | None = None,
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.config = config
        # For HTTP servers behind OAuth: an `oauth.HostOAuth` (or any httpx2.Auth).
        self.auth = auth
        self.diagnostics = StdioDiagnostics()
        self.facts = ServerFacts()
        self.client: Client | None = None
        self.closed = anyio.Event()
        self.failure: McpFailure | None = None
        self._on_tools_changed = on_tools_changed
        self._on_resource_updated = on_resource_updated
        self._http: httpx2.AsyncClient | None = None
        self._connect_scope: anyio.CancelScope | None = None
        # The tool calls in flight.
        self._in_flight: list[_Flight] = []
        # The level last asked of a 2025-era server with `logging/setLevel` (once a watch wants logs).
        self._upstream_level = ""
        # The resources subscribed to on this connection (2025 era: keep_subscribed).
        self._subscribed: set[str] = set()

    # -- transports ------------------------------------------------------------------

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        cfg = self.config
        if cfg.transport == "stdio":
            return hardened_stdio(
                cfg.command,
                cfg.args,
                env=child_environment(cfg.env),
                cwd=cfg.cwd,
                max_line_bytes=cfg.max_message_bytes,
                diagnostics=self.diagnostics,
                name=cfg.name,
                on_close=self.closed.set,
            )
        if cfg.transport == "http":
            assert self._http is not None
            return streamable_http_client(cfg.url, http_client=self._http, max_sse_event_size=cfg.max_message_bytes)

        def factory(headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
            return make_http_client(headers, max_body_bytes=cfg.max_message_bytes, auth=auth)

        return sse_client(cfg.url, headers=dict(cfg.headers), httpx_client_factory=factory, auth=self.auth)

    @asynccontextmanager
    async def _watched(self) -> AsyncIterator[Any]:
        """The transport, with `closed` set whenever it ends (EOF, crash, refused line)."""
        try:
            async with self._transport() as streams:
                yield streams
        finally:
            self.closed.set()

    # -- lifecycle --------------------------------------------------------------------

    async def open(self, stack: AsyncExitStack) -> None:
        """Connect and negotiate; every resource goes on `stack` (the keeper's)."""
        cfg = self.config
        if cfg.transport == "http":
            self._http = make_http_client(dict(cfg.headers), max_body_bytes=cfg.max_message_bytes, auth=self.auth)
            stack.push_async_callback(self._http.aclose)
        client = Client(
            self._watched(),
            mode="auto",
            client_info=types.Implementation(name=CLIENT_NAME, version=CLIENT_VERSION),
            message_handler=self._on_message,
            sampling_callback=self._sample,
            # Declares elicitation (form and url) to every server: its requests reach the
            # person or agent whose call it is (CallWatch.on_elicit).
            elicitation_callback=self._elicit,
            cache=None,
            # The default per-request limit; calls pass their own. It bounds the
            # `server/discover` probe too: a server that never answers it is treated
            # as legacy (MCP.md, "Telling the eras apart") within the connect timeout.
            read_timeout_seconds=max(2.0, cfg.connect_timeout / 3),
        )
        trace = CallTrace()
        token = current_trace.set(trace)
        # The deadline scope goes on the stack first, so that it encloses the client's
        # task groups for their whole life (anyio scopes must nest), and is disarmed once
        # the handshake is done. When it fires, the stack swallows the cancellation: the
        # keeper then finds `connect_timed_out()` true.
        self._connect_scope = stack.enter_context(
            anyio.CancelScope(deadline=anyio.current_time() + cfg.connect_timeout)
        )
        try:
            await stack.enter_async_context(client)
        except McpFailure:
            raise
        except Exception as exc:  # boundary: anything the transport or handshake throws is a failed connect
            raise self._fail(self._connect_failure(exc, trace)) from exc
        finally:
            current_trace.reset(token)
        self._connect_scope.deadline = math.inf
        self.client = client
        version = client.protocol_version
        self.facts = ServerFacts(
            protocol_version=version,
            era="modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy",
            server_info=_dump(client.server_info),
            capabilities=_dump(client.server_capabilities),
            instructions=client.instructions or "",
        )

    def connect_timed_out(self) -> McpFailure | None:
        """After the keeper's stack unwound: the failure, if the handshake ran out of time."""
        if self._connect_scope is not None and self._connect_scope.cancelled_caught:
            return self._fail(
                errors.transport_error(
                    f"no answer to the handshake within {self.config.connect_timeout:g}s", reason="connect_timeout"
                )
            )
        return None

    def _fail(self, failure: McpFailure) -> McpFailure:
        failure.server = self.config.name
        if not failure.stderr_tail:
            failure.stderr_tail = self.diagnostics.stderr_tail()
        self.failure = failure
        return failure

    def _connect_failure(self, exc: BaseException, trace: CallTrace) -> McpFailure:
        exc = _unwrap(exc)
        if isinstance(exc, FileNotFoundError):
            return errors.transport_error(
                f"command not found: {self.config.command}", transient=False, reason="command_not_found"
            )
        if isinstance(exc, PermissionError):
            return errors.transport_error(
                f"command cannot be run: {self.config.command}", transient=False, reason="not_executable"
            )
        if isinstance(exc, httpx2.HTTPStatusError):
            status = exc.response.status_code
            return errors.transport_error(
                f"HTTP {status} from {self.config.url}",
                transient=errors.is_transient_http_status(status),
                reason=f"http_{status}",
                http_status=status,
            )
        if trace.auth_status is not None and self.authorization_needed() is not None:
            return self.authorization_needed()  # type: ignore[return-value]
        if trace.auth_status is not None:
            return errors.transport_error(
                f"HTTP {trace.auth_status} from {self.config.url}: not authorized",
                transient=False,
                reason=f"http_{trace.auth_status}",
                http_status=trace.auth_status,
            )
        if trace.status is not None and trace.status >= 400:
            return errors.transport_error(
                f"HTTP {trace.status} from {self.config.url} during the handshake",
                transient=errors.is_transient_http_status(trace.status),
                reason=f"http_{trace.status}",
                http_status=trace.status,
            )
        if isinstance(exc, httpx2.TransportError) or trace.connect_failed:
            return errors.transport_error(f"cannot reach {self.config.url}: {exc}", reason="unreachable")
        if self.diagnostics.failure is not None:
            return errors.transport_error(str(self.diagnostics.failure), reason="message_too_large")
        if isinstance(exc, MCPError):
            if self.diagnostics.returncode is not None:
                return errors.transport_error(
                    f"the server exited during the handshake (status {self.diagnostics.returncode})", reason="crashed"
                )
            return errors.transport_error(f"handshake failed: {exc.error.message}", reason="handshake_failed")
        return errors.transport_error(f"cannot connect: {type(exc).__name__}: {exc}", reason="connect_failed")

    def authorization_needed(self, since: float | None = None) -> McpFailure | None:
        """The failure to report when the server's OAuth wants a person (see `oauth`):
        the auth's last challenge, if there is one (and it came after `since`)."""
        challenge = getattr(self.auth, "challenge", None)
        if challenge is None or (since is not None and challenge.at < since):
            return None
        return errors.transport_error(
            f"{self.config.url}: {challenge.describe()}; connect it again from the Servers page",
            transient=False,
            reason="needs_authorization",
            http_status=challenge.status,
        )

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            logger.warning("%s: transport reported %r", self.config.name, message)
            return
        method = getattr(message, "method", None)
        if method == "notifications/tools/list_changed" and self._on_tools_changed is not None:
            await self._on_tools_changed()
        elif method == "notifications/message":
            await self._pass_log(message.params)
        elif method == "notifications/resources/updated" and self._on_resource_updated is not None:
            await self._on_resource_updated(message.params.uri)

    def _flight_of_request(self) -> _Flight | None:
        """The call a server's message or request belongs to (CallWatch)."""
        flight = _current_flight.get()
        if flight is not None:
            return flight
        return self._in_flight[0] if len(self._in_flight) == 1 else None

    def _watch_of_request(self) -> CallWatch | None:
        flight = self._flight_of_request()
        return flight.watch if flight is not None else None

    async def _elicit(self, context: Any, params: types.ElicitRequestParams) -> Any:
        """A server's request for input (`elicitation/create`, or one of an `input_required`
        result's requests), to whoever answers for the call it belongs to (CallWatch)."""
        flight = self._flight_of_request()
        watch = flight.watch if flight is not None else None
        if flight is None or watch is None or watch.on_elicit is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message=NO_INPUT)
        modern = self.facts.era == "modern"
        ask = InputAsk(
            server=self.config.name,
            params=_dump(params),
            era=self.facts.era,
            key=str(getattr(context, "request_id", "") or "") if modern else "",
        )
        flight.pause()
        try:
            with anyio.CancelScope() as scope:
                flight.asks.add(scope)
                try:
                    answer = await watch.on_elicit(ask)
                finally:
                    flight.asks.discard(scope)
                    if not flight.asks:
                        flight.quiet.set()
            if scope.cancelled_caught:
                return types.ErrorData(code=types.INVALID_REQUEST, message="the call ended before the input was given")
            return types.ElicitResult.model_validate(answer)
        except InputRefused as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
        except MCPError as exc:
            return exc.error
        except ValidationError as exc:
            # Where, never what: an answer is never logged.
            where = sorted({".".join(str(p) for p in e.get("loc", ())) for e in exc.errors(include_input=False)})
            logger.warning("%s: an answer to a request for input was not valid at %s", self.config.name, where)
            return types.ErrorData(code=types.INTERNAL_ERROR, message="the host could not form an answer")
        except Exception as exc:  # boundary: the server is answered, whatever went wrong
            logger.exception("%s: a request for input could not be answered", self.config.name)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the input could not be asked for: {exc}")
        finally:
            flight.resume()

    async def _sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        """A server's `sampling/createMessage`, to the agent whose call it is (CallWatch)."""
        watch = self._watch_of_request()
        if watch is None or watch.on_sample is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message=NO_SAMPLING)
        try:
            return await watch.on_sample(params)
        except MCPError as exc:
            return exc.error
        except Exception as exc:  # boundary: the server is answered, whatever went wrong
            logger.info("%s: a sampling request could not be passed on: %r", self.config.name, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the agent could not be asked: {exc}")

    async def _pass_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """A server's log message, to the watch of the one call in flight (CallWatch)."""
        watch = self._watch_of_request()
        if watch is None or not watch.hears(params.level) or watch.on_log is None:
            return
        entry = {"level": params.level, "logger": params.logger, "data": params.data}
        try:
            await _maybe_await(watch.on_log(entry))
        except Exception:  # boundary: a watcher gone only misses a message
            logger.debug("%s: a log message could not be passed on", self.config.name, exc_info=True)

    async def listen_for_changes(self) -> None:
        """Modern servers announce list changes only on a `subscriptions/listen` stream."""
        if self.client is None or self.facts.era != "modern":
            return
        tools_cap = self.facts.capabilities.get("tools") or {}
        if not tools_cap.get("listChanged"):
            return
        try:
            async with self.client.listen(tools_list_changed=True) as sub:
                async for _event in sub:
                    if self._on_tools_changed is not None:
                        await self._on_tools_changed()
        except Exception as exc:  # boundary: a lost subscription only costs change notices
            logger.info("%s: subscriptions/listen ended: %r", self.config.name, exc)

    async def keep_subscribed(self, wanted: Callable[[], frozenset[str]], changed: asyncio.Event) -> None:
        """Be subscribed to the resources `wanted()` names until `changed` is set. 2025 era:
        `resources/subscribe` for each new URI and `resources/unsubscribe` for each dropped
        (updates come as notifications); 2026-07-28: one `subscriptions/listen` stream
        naming them all, opened again when they change."""
        client = self._require_client()
        uris = wanted()
        if self.facts.era != "modern":
            for uri in sorted(uris - self._subscribed):
                try:
                    await self._request(functools.partial(client.subscribe_resource, uri), timeout=10)
                    self._subscribed.add(uri)
                except McpFailure as exc:
                    logger.info("%s: resources/subscribe %s failed: %s", self.config.name, uri, exc)
            for uri in sorted(self._subscribed - uris):
                self._subscribed.discard(uri)
                try:
                    await self._request(functools.partial(client.unsubscribe_resource, uri), timeout=10)
                except McpFailure as exc:
                    logger.info("%s: resources/unsubscribe %s failed: %s", self.config.name, uri, exc)
            await changed.wait()
            return
        if not uris:
            await changed.wait()
            return
        try:
            async with client.listen(resource_subscriptions=sorted(uris)) as sub, anyio.create_task_group() as tg:

                async def relay() -> None:
                    async for event in sub:
                        uri = getattr(event, "uri", None)
                        if isinstance(uri, str) and self._on_resource_updated is not None:
                            await self._on_resource_updated(uri)

                tg.start_soon(relay)
                await changed.wait()
                tg.cancel_scope.cancel()
        except Exception as exc:  # boundary: a lost stream costs updates until the next change
            logger.info("%s: resource subscriptions ended: %r", self.config.name, exc)
            await changed.wait()

    # -- requests --------------------------------------------------------------------

    def _require_client(self) -> Client:
        if self.client is None or self.closed.is_set():
            raise (
                self._fail(errors.transport_error("the connection is closed", reason="closed"))
                if self.failure is None
                else self.failure
            )
        return self.client

    async def list_tools(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, following `nextCursor` to the last page."""
        client = self._require_client()
        return await self._list_pages("tools", client.list_tools, "tools", MAX_TOOLS, timeout)

    async def list_resources(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every resource, following `nextCursor` to the last page ([] without the capability)."""
        if "resources" not in self.facts.capabilities:
            return []
        client = self._require_client()
        return await self._list_pages("resources", client.list_resources, "resources", MAX_ITEMS, timeout)

    async def list_resource_templates(self, timeout: float | None = None) -> list[dict[str, Any]]:
        if "resources" not in self.facts.capabilities:
            return []
        client = self._require_client()
        fetch = client.list_resource_templates
        return await self._list_pages("resource templates", fetch, "resource_templates", MAX_ITEMS, timeout)

    async def list_prompts(self, timeout: float | None = None) -> list[dict[str, Any]]:
        if "prompts" not in self.facts.capabilities:
            return []
        client = self._require_client()
        return await self._list_pages("prompts", client.list_prompts, "prompts", MAX_ITEMS, timeout)

    async def _list_pages(
        self, what: str, fetch: Callable[..., Awaitable[Any]], field: str, cap: int, timeout: float | None
    ) -> list[dict[str, Any]]:
        """Every item of one listing (`field` of each page), following `nextCursor`."""
        items: list[dict[str, Any]] = []
        seen_cursors: set[str] = set()
        cursor: str | None = None
        with anyio.fail_after(timeout or self.config.call_timeout):
            for _page in range(MAX_LIST_PAGES):
                result = await self._request(functools.partial(fetch, cursor=cursor, cache_mode="bypass"))
                items.extend(_dump_listed(item) for item in getattr(result, field))
                if len(items) > cap:
                    raise errors.protocol_error(f"the server lists more than {cap} {what}", reason=f"too_many_{field}")
                cursor = result.next_cursor
                if not cursor:
                    return items
                if cursor in seen_cursors:
                    raise errors.protocol_error(
                        f"the server's {what} pages loop back on themselves", reason="cursor_loop"
                    )
                seen_cursors.add(cursor)
        raise errors.protocol_error(f"the {what} listing has more than {MAX_LIST_PAGES} pages", reason="too_many_pages")

    async def read_resource(
        self, uri: str, timeout: float | None = None, rounds: Rounds | None = None
    ) -> dict[str, Any]:
        """One resource's contents (`ReadResourceResult` as plain data); with `rounds`, a
        2026-07-28 server's round of input requests comes back as it is (`Rounds`)."""
        client = self._require_client()
        if rounds is not None and self.facts.era == "modern":
            return await self._read(
                lambda: client.session.read_resource(
                    uri,
                    input_responses=_responses(rounds.responses),
                    request_state=rounds.state,
                    allow_input_required=True,
                ),
                timeout,
            )
        return await self._read(lambda: client.read_resource(uri, cache_mode="bypass"), timeout)

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, str] | None = None,
        timeout: float | None = None,
        rounds: Rounds | None = None,
    ) -> dict[str, Any]:
        """One prompt filled in with `arguments` (`GetPromptResult` as plain data); with
        `rounds`, as `read_resource`."""
        client = self._require_client()
        if rounds is not None and self.facts.era == "modern":
            return await self._read(
                lambda: client.session.get_prompt(
                    name,
                    arguments or {},
                    input_responses=_responses(rounds.responses),
                    request_state=rounds.state,
                    allow_input_required=True,
                ),
                timeout,
            )
        return await self._read(lambda: client.get_prompt(name, arguments or {}), timeout)

    async def _read(self, send: Callable[[], Awaitable[Any]], timeout: float | None) -> dict[str, Any]:
        """One read (a resource, a prompt) within its time, as plain data."""
        limit = timeout if timeout is not None else self.config.call_timeout
        with anyio.fail_after(limit):
            return _dump(await self._request(send, timeout=limit))

    async def complete(
        self,
        ref: dict[str, str],
        argument: dict[str, str],
        context_arguments: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Completions of one argument of a prompt (`ref` {"type": "ref/prompt", "name"}) or
        a resource template ({"type": "ref/resource", "uri"}) (`CompleteResult` as plain data;
        no values from a server that declares no completions)."""
        if "completions" not in self.facts.capabilities:
            return {"completion": {"values": []}}
        client = self._require_client()
        reference: types.PromptReference | types.ResourceTemplateReference = (
            types.PromptReference(type="ref/prompt", name=ref["name"])
            if ref.get("type") == "ref/prompt"
            else types.ResourceTemplateReference(type="ref/resource", uri=ref["uri"])
        )
        limit = timeout if timeout is not None else self.config.call_timeout
        with anyio.fail_after(limit):
            return _dump(
                await self._request(lambda: client.complete(reference, argument, context_arguments), timeout=limit)
            )

    async def probe(self, timeout: float = 10.0) -> float:
        """A cheap MCP-level health check (the first page of tools); returns seconds taken."""
        client = self._require_client()
        started = time.perf_counter()
        with anyio.fail_after(timeout):
            await self._request(lambda: client.list_tools(cache_mode="bypass"))
        return time.perf_counter() - started

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        meta: dict[str, Any] | None = None,
        watch: CallWatch | None = None,
        rounds: Rounds | None = None,
    ) -> dict[str, Any]:
        """Call a tool; the CallToolResult as plain data (``isError`` results included).
        `watch` hears its progress and log messages (CallWatch); with `rounds`, a 2026-07-28
        server's request for input is handed back (`Rounds`)."""
        client = self._require_client()
        limit = timeout if timeout is not None else self.config.call_timeout

        progress_callback = None
        if watch is not None and watch.on_progress is not None:
            on_progress = watch.on_progress

            async def progress_callback(progress: float, total: float | None, message: str | None) -> None:
                await _maybe_await(on_progress(progress, total, message))

        if watch is not None and watch.on_log is not None and watch.log_level in LOG_LEVELS:
            meta = await self._ask_logs(client, watch.log_level, meta)
        flight = _Flight(watch)
        # A call whose server may ask a person for input keeps its own clock (_Flight), which
        # stops while they answer; the SDK's would run on.
        asks = watch is not None and watch.on_elicit is not None
        self._in_flight.append(flight)
        token = _current_flight.set(flight)
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + limit if asks else math.inf) as scope:
                flight.scope = scope
                if rounds is not None and self.facts.era == "modern":
                    result = await self._request(
                        lambda: client.session.call_tool(  # type: ignore[call-overload]
                            name,
                            arguments or {},
                            read_timeout_seconds=math.inf if asks else limit,
                            progress_callback=progress_callback,
                            input_responses=_responses(rounds.responses),
                            request_state=rounds.state,
                            meta=meta,
                            allow_input_required=True,
                        ),
                        timeout=limit,
                    )
                else:
                    result = await self._request(
                        lambda: client.call_tool(
                            name,
                            arguments or {},
                            read_timeout_seconds=math.inf if asks else limit,
                            progress_callback=progress_callback,
                            meta=meta,  # type: ignore[arg-type]
                        ),
                        timeout=limit,
                    )
            if scope.cancelled_caught:
                raise self._fail_call(
                    errors.ambiguous_error(f"no answer within {limit:g}s (cancelled)", reason="timeout")
                )
        finally:
            _current_flight.reset(token)
            self._in_flight.remove(flight)
            await flight.settle()
        return _dump(result)

    async def _ask_logs(self, client: Client, level: str, meta: dict[str, Any] | None) -> dict[str, Any] | None:
        """Ask the server for log messages at `level`: in the request's `_meta` (2026-07-28),
        or with `logging/setLevel` for the session, lowered as callers ask for more (2025)."""
        if self.facts.era == "modern":
            return {**(meta or {}), types.LOG_LEVEL_META_KEY: level}
        if "logging" not in self.facts.capabilities:
            return meta
        if not self._upstream_level or LOG_LEVELS.index(level) < LOG_LEVELS.index(self._upstream_level):
            try:
                await self._request(lambda: client.set_logging_level(level), timeout=10)  # type: ignore[arg-type]
                self._upstream_level = level
            except McpFailure as exc:  # the call goes on without the server's logs
                logger.info("%s: logging/setLevel %s failed: %s", self.config.name, level, exc)
        return meta

    async def _request(self, send: Callable[[], Awaitable[Any]], timeout: float | None = None) -> Any:
        """Send one request and translate every way it can fail into the taxonomy."""
        trace = CallTrace()
        token = current_trace.set(trace)
        was_closed = self.closed.is_set()
        started = time.monotonic()
        try:
            return await send()
        except MCPError as exc:
            if exc.error.code == errors.SDK_CONNECTION_CLOSED:
                await self._settle()
            needed = self.authorization_needed(since=started)
            if needed is not None:
                # The server refused this request for want of authorization (the auth's
                # own token requests may be what the trace saw last).
                raise self._fail_call(needed) from None
            raise self._classify(exc, trace, was_closed, timeout) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or "result"
            raise self._fail_call(
                errors.protocol_error(
                    f"the server's answer does not follow the protocol: {where}: {first['msg']}",
                    reason="invalid_result",
                )
            ) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            await self._settle()
            raise self._fail_call(self._lost(trace, was_closed)) from None
        finally:
            current_trace.reset(token)

    async def _settle(self) -> None:
        """A stdio connection just closed: give the child a moment to be seen exiting,
        so the failure can say it crashed (and with which status) rather than "lost"."""
        if self.config.transport == "stdio" and self.diagnostics.returncode is None:
            with anyio.move_on_after(0.5):
                await self.diagnostics.exited.wait()

    def _fail_call(self, failure: McpFailure) -> McpFailure:
        failure.server = self.config.name
        if self.config.transport == "stdio" and not failure.stderr_tail:
            failure.stderr_tail = self.diagnostics.stderr_tail()
        return failure

    def _lost(self, trace: CallTrace, was_closed: bool) -> McpFailure:
        if self.diagnostics.failure is not None or trace.too_large:
            failure = errors.ambiguous_error(
                str(
                    self.diagnostics.failure
                    or f"the server sent a message of more than {self.config.max_message_bytes} bytes"
                ),
                reason="message_too_large",
            )
            self.failure = failure
            return failure
        if was_closed or trace.connect_failed or (self.config.transport != "stdio" and not trace.sent):
            detail = trace.error or "the connection was already closed"
            return errors.transport_error(f"not sent: {detail}", reason="unreachable")
        code = self.diagnostics.returncode
        if code is not None:
            failure = errors.ambiguous_error(f"the server exited during the call (status {code})", reason="crashed")
        else:
            failure = errors.ambiguous_error(
                f"the connection was lost during the call{': ' + trace.error if trace.error else ''}", reason="lost"
            )
        self.failure = failure
        return failure

    def _classify(self, exc: MCPError, trace: CallTrace, was_closed: bool, timeout: float | None) -> McpFailure:
        code = exc.error.code
        message = exc.error.message
        if code == errors.SDK_REQUEST_TIMEOUT and "timed out" in message:
            return self._fail_call(
                errors.ambiguous_error(
                    f"no answer within {timeout or self.config.call_timeout:g}s (cancelled)", reason="timeout"
                )
            )
        if code == errors.SDK_CONNECTION_CLOSED and message == "Connection closed":
            return self._fail_call(self._lost(trace, was_closed))
        if trace.too_large or (code == errors.PARSE_ERROR and "more than" in message):
            failure = errors.ambiguous_error(
                f"the server sent a message of more than {self.config.max_message_bytes} bytes",
                reason="message_too_large",
            )
            self.failure = failure
            return self._fail_call(failure)
        if trace.status is not None and trace.status >= 400:
            status = trace.status
            if status in (429, 503):
                # The server turned the request away before working on it.
                return self._fail_call(
                    errors.transport_error(f"HTTP {status}: {message}", reason=f"http_{status}", http_status=status)
                )
            if status >= 500:
                return self._fail_call(
                    errors.ambiguous_error(
                        f"HTTP {status} after the request was sent", reason=f"http_{status}", http_status=status
                    )
                )
            if status in (401, 403):
                needed = self.authorization_needed()
                if needed is not None:
                    return self._fail_call(needed)
                return self._fail_call(
                    errors.transport_error(
                        f"HTTP {status}: not authorized", transient=False, reason=f"http_{status}", http_status=status
                    )
                )
        if trace.connect_failed and not trace.sent:
            return self._fail_call(errors.transport_error(f"not sent: {trace.error}", reason="unreachable"))
        if code == errors.INTERNAL_ERROR:
            # The server worked on the request and failed inside: whether it did anything is unknown.
            return self._fail_call(
                errors.ambiguous_error(f"server error: {message}", reason="internal_error", code=code)
            )
        reason = {
            errors.METHOD_NOT_FOUND: "method_not_found",
            errors.INVALID_PARAMS: "invalid_params",
            errors.INVALID_REQUEST: "invalid_request",
            errors.PARSE_ERROR: "parse_error",
        }.get(code, "jsonrpc_error")
        if code == errors.INVALID_PARAMS and _UNKNOWN_TOOL_RE.search(message):
            reason = "unknown_tool"
        return self._fail_call(errors.protocol_error(message, code=code, data=exc.error.data, reason=reason))


_INPUT_RESPONSE: TypeAdapter[types.InputResponse] = TypeAdapter(types.InputResponse)


def _responses(given: dict[str, dict[str, Any]] | None) -> types.InputResponses | None:
    """Answers of a round (`Rounds.responses`: an `ElicitResult`, a `CreateMessageResult`...
    as plain data) as the SDK sends them."""
    if given is None:
        return None
    return {key: _INPUT_RESPONSE.validate_python(value) for key, value in given.items()}


def _unwrap(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (task groups wrap what their tasks raise)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
