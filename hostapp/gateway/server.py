"""The agents' endpoint: the merged catalog served as one MCP server at /mcp.

Built on the SDK's server side (its Streamable HTTP app serves both eras: modern
stateless requests and 2025-era sessions). Patchbay adds what a host must:

* bearer tokens per agent (stored hashed), checked before the SDK sees the request;
  `Origin` checked against the allowed hosts (403), like the SDK does for Host;
* the tool list is the active catalog, as the host applies it (sanitized descriptions,
  applied annotations, an admin's renames), as the agent's view shows it
  (agent_catalog.py), answered from memory and reloaded when the catalog changes; an
  agent whose list changed is told so (notices.py: list_changed to 2025-era sessions, a
  `subscriptions/listen` event to modern clients), and no other;
* every call goes through the same ledger and policy as a person's: read-only calls
  pass through; write calls are queued and awaited up to a limit; destructive calls wait
  for a person while progress notifications keep a client that asked informed; past the
  limit the agent gets a result naming the call and how to ask for its status.

A read-only call goes straight to its server when the policy's decision for its tool was
read from the database less than `POLICY_FRESH` ago (by an earlier call) and the catalog
has not changed since; its row and its events are written in one transaction when the
server has answered, and committed before the agent hears the answer. A call that runs
longer than `RUNNING_VISIBLE_AFTER` is written as running first. Any other call reads the
tool and the rules and writes its row before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone
from mcp.server import Server
from mcp.server.caching import CacheHint
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hostapp.calls import actions as calls
from hostapp.calls import inputs, life, reads
from hostapp.calls.models import Call
from hostapp.calls.policy import Decision
from hostapp.catalog.pool import apool_for, current_pool
from hostapp.core.jsonvalues import storable
from hostapp.mcp import (
    LOG_LEVELS,
    CallWatch,
    InputAsk,
    InputRefused,
    McpFailure,
    Pool,
    Rounds,
    errors,
    input_required,
    result_failure,
)

from .agent_catalog import Catalog, CatalogCache
from .agent_offers import agent_content
from .agent_view import AgentInfo
from .notices import PROMPTS, RESOURCES, TOOLS, Notices, current_agent
from .updates import Subscriber, Updates

logger = logging.getLogger(__name__)

STATUS_TOOL = "patchbay__call_status"
AGENT_SCOPE_KEY = "patchbay.agent"
PROGRESS_EVERY = 5.0
# A waiting agent's call is read again this often even without a move heard (a lost event).
RECHECK = 2.0
# How long what the policy decided for a read-only tool (read with a call) lets later calls
# of it go to the server without reading the tool and the rules again. A catalog change forgets it at once;
# this bounds how long a rule or a tool change can take to apply when no change event
# reaches this process.
POLICY_FRESH = 1.0
# A read-only call sent before its row is written: still running after this long, it is
# written as running (the Calls page shows it) and finished as any other.
RUNNING_VISIBLE_AFTER = 0.5
# The JSON-RPC error of a read the host refuses (a disabled or blocked server, a
# quarantined prompt): implementation-defined range.
REFUSED = -32000
# 2025-era sessions whose `logging/setLevel` is kept (the oldest forgotten first).
LOG_SESSIONS_MAX = 5000


# What an agent waiting for its call is told the call is doing.
_WAITING_FOR = {
    Call.WAITING: "waiting for a person's approval",
    Call.QUEUED: "being delivered",
    Call.RUNNING: "being delivered",
    Call.INPUT: "waiting for a person's input",
}


@dataclass(frozen=True)
class Route:
    """What `start_call` read and decided for a read-only tool, and when (time.monotonic)."""

    tool: Any  # hostapp.catalog.models.Tool, with its server
    decision: Decision
    read_at: float
    schema: str  # its input schema, as hostapp.calls.actions.check_arguments takes it


class _CallRef:
    """The row of an agent's call, for a server's request for input during it: known once the
    call is written; `ensure`, on the endpoint's loop, writes it first when it is not yet (a
    read-only call sent before its row)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.call_id: int | None = None
        self.ensure: Any = None

    async def __call__(self) -> int:
        if self.call_id is None and self.ensure is not None:
            written = asyncio.run_coroutine_threadsafe(self.ensure(), self.loop)
            self.call_id = await asyncio.wrap_future(written)
        if self.call_id is None:
            raise InputRefused("the call is not on record")
        return self.call_id


def _state_key() -> bytes:
    """The key that seals rounds of input handed to agents (from the host's secret key)."""
    return hashlib.sha256(f"patchbay request state:{settings.SECRET_KEY}".encode()).digest()


def _principal(ctx: Any) -> str | None:
    """Whose sealed round it is: the agent's token."""
    request = getattr(ctx, "request", None)
    agent = request.scope.get(AGENT_SCOPE_KEY) if request is not None else None
    return f"agent:{agent.pk}" if agent is not None else None


def _hands_rounds(ctx: Any) -> bool:
    """A 2026-07-28 agent whose client declared elicitation is handed its call's rounds of
    input (`Gateway._round`); any other agent's are answered in the host."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or ctx.session is None:
        return False
    declared = ctx.session.client_capabilities
    return declared is not None and declared.elicitation is not None


def _held(params: Any) -> dict[str, Any]:
    """What a round handed to the agent held (`_handed`), as it came back (the boundary has
    checked and opened it); {} for a request that is no answer to a round of ours."""
    try:
        held = json.loads(params.request_state or "{}")
    except json.JSONDecodeError:
        return {}
    return held if isinstance(held, dict) else {}


def _answers(params: Any) -> dict[str, dict[str, Any]]:
    """The agent's answers to a round (`inputResponses`), as plain data by key."""
    return {
        key: value.model_dump(by_alias=True, mode="json", exclude_none=True)
        for key, value in (params.input_responses or {}).items()
    }


def _handed(result: dict[str, Any], held: dict[str, Any]) -> types.InputRequiredResult:
    """A server's round of input requests as the agent is handed it: the requests as they
    are, the server's state kept with `held` in ours (the boundary seals it)."""
    state = json.dumps({**held, "state": result.get("requestState")})
    return types.InputRequiredResult.model_validate(
        {"resultType": "input_required", "inputRequests": result.get("inputRequests") or {}, "requestState": state}
    )


def _read_rounds(ctx: Any, params: Any) -> Rounds | None:
    """How a read (prompts/get, resources/read) goes to its server for an agent that answers
    its own rounds of input (`_hands_rounds`): with its answers, and the server's state when
    they answer a round it was handed (answers given without one go on as they are, for a
    server that asks again what they leave out); None for any other agent (a server's
    request for input to it is refused)."""
    if not _hands_rounds(ctx):
        return None
    return Rounds(_answers(params) or None, _held(params).get("state"))


def _status_tool() -> types.Tool:
    return types.Tool(
        name=STATUS_TOOL,
        title="Status of a call",
        description=(
            "Ask Patchbay for the status of one of your earlier tool calls, by the call id it gave you "
            "(for a call still waiting for a person's approval, or still being delivered). Returns the "
            "status and, once finished, the result or the error."
        ),
        input_schema={
            "type": "object",
            "properties": {"call_id": {"type": "integer", "description": "The call id Patchbay gave you"}},
            "required": ["call_id"],
        },
        annotations=types.ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )


def _without_meta(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in ("_meta", "resultType")}


# A server's error data larger than this (bytes of JSON) does not reach the agent.
ERROR_DATA_CAP = 4096


def _mcp_error(failure: McpFailure, uri: str | None = None) -> MCPError:
    """A server's failure as the agent is answered: the server's own JSON-RPC error (its code
    where it is one of the protocol's, and its data, capped), else an internal error naming
    the server. `uri`: the resource as the agent named it, in place of the server's own in
    the data (SEP-2164's `data.uri`)."""
    if failure.code is None or not -32768 <= failure.code <= -32000:
        return MCPError(INTERNAL_ERROR, str(failure))
    data = failure.data
    if uri is not None and isinstance(data, dict) and "uri" in data:
        data = {**data, "uri": uri}
    if data is not None and len(json.dumps(data, default=str)) > ERROR_DATA_CAP:
        data = None
    return MCPError(failure.code, str(failure), data)


def _fingerprints(catalog: Catalog, agent: AgentInfo) -> dict[str, int]:
    """What `agent` is listed now, each list (notices.py tells it when one changes)."""
    prompts, resources = catalog.offers.fingerprints(agent)
    return {TOOLS: catalog.fingerprint(agent), PROMPTS: prompts, RESOURCES: resources}


def _agent(ctx: Any) -> AgentInfo:
    request = getattr(ctx, "request", None)
    agent = request.scope.get(AGENT_SCOPE_KEY) if request is not None else None
    if agent is None:  # the ASGI wrapper authenticates every request; this is a guard
        raise PermissionError("no agent")
    return agent


def _text_result(
    text: str, *, is_error: bool = False, structured: dict[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
    )


def _upstream_result(result: dict[str, Any], agent: AgentInfo | None, server: str) -> types.CallToolResult:
    """The server's result as the agent gets it: its `_meta` stays behind, and the resources
    it names are named as the agent reads them (agent_offers.py)."""
    clean = {k: v for k, v in result.items() if k not in ("_meta", "resultType")}
    if agent is not None and "content" in clean:
        clean["content"] = agent_content(agent, server, clean["content"])
    return types.CallToolResult.model_validate(clean)


def result_for(call: Call, agent: AgentInfo | None = None) -> types.CallToolResult:
    """What an agent is told about a call in a final (or given-up-on) state."""
    if call.status == Call.SUCCEEDED and call.result is not None:
        return _upstream_result(call.result, agent, call.server_name)
    if call.status == Call.DENIED:
        who = f" by {call.decided_by_name}" if call.decided_by_name else ""
        return _text_result(f"Call #{call.pk} was denied{who}. Reason: {call.denial_reason}", is_error=True)
    if call.status == Call.EXPIRED:
        return _text_result(
            f"Call #{call.pk} expired: nobody approved it in time ({call.denial_reason}).", is_error=True
        )
    if call.status == Call.BLOCKED:
        return _text_result(f"Call #{call.pk} was refused: {(call.error or {}).get('message', '')}", is_error=True)
    if call.status in (Call.FAILED, Call.DEAD):
        if call.result is not None and call.result.get("isError"):
            return _upstream_result(call.result, agent, call.server_name)
        parked = " (a dead letter now: a person may redrive or discard it)" if call.status == Call.DEAD else ""
        return _text_result(
            f"Call #{call.pk} failed{parked}: {(call.error or {}).get('message', 'unknown error')}", is_error=True
        )
    if call.status == Call.UNKNOWN:
        return _text_result(
            f"Call #{call.pk}: the outcome is unknown (the server may or may not have acted); a person will "
            "check it. Ask again later with patchbay__call_status.",
            structured={"call_id": call.pk, "status": call.status},
        )
    waiting = "is waiting for a person's approval" if call.status == Call.WAITING else f"is {call.get_status_display()}"
    return _text_result(
        f"Call #{call.pk} {waiting}. It has not finished yet; ask for its status later with the tool "
        f'{STATUS_TOOL} and {{"call_id": {call.pk}}}.',
        structured={"call_id": call.pk, "status": call.status},
    )


class Gateway:
    def __init__(self) -> None:
        self.catalog = CatalogCache()
        self.notices = Notices()
        # Read-only tools whose calls may be answered before their row is written, by
        # exposed name; the generation moves on every catalog change, so a read from before
        # it is not kept.
        self.routes: dict[str, Route] = {}
        self._routes_generation = 0
        self._background: set[asyncio.Future[Any]] = set()
        # Agents waiting for calls, by call id: `calls_moved` wakes them.
        self._waiting: dict[int, set[asyncio.Event]] = {}
        # The log level each 2025-era session set (`logging/setLevel`), by Mcp-Session-Id.
        self._log_levels: dict[str, str] = {}
        self._listen = ListenHandler(self.notices.bus)
        self.updates = Updates(self.notices.bus)
        self.server: Server[Any] = Server(
            "patchbay",
            version="0.1.0",
            title="Patchbay",
            instructions=(
                "Tools of every MCP server configured in this Patchbay host, named <server>__<tool>. "
                "Calls that change things may wait for a person's approval or be queued; such calls "
                f"answer with a call id: ask for their status with {STATUS_TOOL}."
            ),
            # Mcp-Param-* header checks (modern era) read the schema from memory rather than
            # running the tools/list handler for every call.
            get_tool_input_schema=self._input_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_completion=self.complete,
            on_set_logging_level=self.set_logging_level,
            on_subscribe_resource=self.subscribe_resource,
            on_unsubscribe_resource=self.unsubscribe_resource,
            on_subscriptions_listen=self.listen,
            cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
        )
        # The state of a round of input handed to a 2026-07-28 agent (`_handed`: a tool call's,
        # a prompt's, a resource read's) is sealed on the way out (AES-GCM, bound to the
        # method, the tool, prompt or URI, its arguments and the agent) and checked
        # on the way back: the agent can neither read the server's state nor change it. Every
        # web process seals with the same key, so the agent may come back to any of them.
        security = RequestStateSecurity(
            keys=[_state_key()], bind_principal=_principal, ttl=float(settings.PATCHBAY_INPUT_WAIT)
        )
        self.server.middleware.append(RequestStateBoundary(security, default_audience="patchbay"))

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The schema the SDK checks `Mcp-Param-*` headers against: only of a tool this
        request's agent may use (to others it does not exist, as in the tool list)."""
        catalog = self.catalog.peek()
        agent = current_agent.get()
        entry = catalog.find(agent, name) if catalog is not None and agent is not None else None
        return entry.face(agent).input_schema if entry is not None and agent is not None else None

    def _remember(self, ctx: Any, agent: AgentInfo) -> None:
        """The agent is connected; a 2025-era session is kept to be told of changes."""
        session_id = None
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.session is not None:
            request = getattr(ctx, "request", None)
            session_id = request.headers.get("mcp-session-id") if request is not None else None
        self.notices.seen(agent, session_id, ctx.session)

    @staticmethod
    def _session_id(ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        return request.headers.get("mcp-session-id") if request is not None else None

    async def set_logging_level(self, ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """`logging/setLevel` (2025 era): the session hears its calls' log messages from then on."""
        session_id = self._session_id(ctx)
        if session_id:
            self._log_levels.pop(session_id, None)
            self._log_levels[session_id] = params.level
            while len(self._log_levels) > LOG_SESSIONS_MAX:
                del self._log_levels[next(iter(self._log_levels))]
        return types.EmptyResult()

    def _watch(self, ctx: Any, params: types.CallToolRequestParams, ref: _CallRef) -> CallWatch:
        """What the agent hears of its call while the server runs it: the server's progress
        (if the agent asked for progress) and its log messages (if the agent set a level:
        in the request's `_meta` in 2026-07-28, with `logging/setLevel` in 2025); who answers
        the server's requests for input (`_elicitor`)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            level = (params.meta or {}).get(types.LOG_LEVEL_META_KEY)
        else:
            level = self._log_levels.get(self._session_id(ctx) or "")
        loop = asyncio.get_running_loop()
        session = ctx.session

        def hop(coro: Any) -> None:  # the pool calls back on its own loop: sent on this one
            asyncio.run_coroutine_threadsafe(coro, loop)

        def on_log(entry: dict[str, Any]) -> None:
            hop(session.send_log_message(entry["level"], entry["data"], entry["logger"], ctx.request_id))

        return CallWatch(
            on_progress=lambda progress, total, message: hop(session.report_progress(progress, total, message)),
            on_log=on_log,
            log_level=level if level in LOG_LEVELS else "",
            on_sample=self._sampler(ctx, loop),
            on_elicit=self._elicitor(ctx, loop, ref, hop),
        )

    @staticmethod
    def _elicitor(ctx: Any, loop: asyncio.AbstractEventLoop, ref: _CallRef, hop: Any) -> Any:
        """Who answers a server's request for input during the agent's call: the agent's own
        client, on its 2025-era session, when it declared elicitation in the mode asked for;
        otherwise a person (hostapp/calls/inputs.py), while the agent hears progress. (A
        2026-07-28 client would be asked through an input request of the call's result, with
        the server's state sealed; the host does not make those yet.)"""
        session = ctx.session

        async def waiting(row: Any) -> None:  # on the pool's loop, beside the wait
            ticks = 0
            while True:
                ticks += 1
                text = f"Call #{row.call_id} waits for a person's input, asked by {row.server_name}"
                hop(session.report_progress(ticks, None, text))
                await asyncio.sleep(PROGRESS_EVERY)

        person = inputs.person_answers(ref, waiting=waiting)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or session is None:
            return person
        declared = session.client_capabilities
        elicitation = declared.elicitation if declared is not None else None
        if elicitation is None:
            return person
        # An empty `elicitation` declares form mode (the 2025-06-18 shape).
        modes = {
            "form": elicitation.form is not None or elicitation.url is None,
            "url": elicitation.url is not None,
        }
        related = ServerMessageMetadata(related_request_id=ctx.request_id)

        async def ask_agent(params: dict[str, Any]) -> dict[str, Any]:
            request = types.ElicitRequest.model_validate({"method": "elicitation/create", "params": params})
            asked = session.send_request(request, types.ElicitResult, metadata=related)
            result = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(asked, loop))
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        agent = inputs.agent_answers(ref, ask_agent)

        async def on_elicit(ask: InputAsk) -> dict[str, Any]:
            mode = ask.params.get("mode") or "form"
            return await (agent if modes.get(mode) else person)(ask)

        return on_elicit

    @staticmethod
    def _sampler(ctx: Any, loop: asyncio.AbstractEventLoop) -> Any:
        """How a server's sampling request during the call reaches the agent's client: on
        its 2025-era session, if its client declared sampling (the host runs no model); None
        (refused, hostapp/mcp/connection.py says why) otherwise. A 2026-07-28 client is
        asked through an input request of the call's result, which the host does not make yet."""
        session = ctx.session
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or session is None:
            return None
        if not session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
            return None
        related = ServerMessageMetadata(related_request_id=ctx.request_id)

        async def sample(params: types.CreateMessageRequestParams) -> Any:
            kind = types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult
            asked = session.send_request(types.CreateMessageRequest(params=params), kind, metadata=related)
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(asked, loop))

        return sample

    async def listen(self, ctx: Any, params: Any) -> Any:
        """`subscriptions/listen` (2026-07-28): the SDK's handler, its stream kept as the agent's;
        the resources it names are subscribed to for as long as it is open (updates.py)."""
        agent = _agent(ctx)
        self.notices.seen(agent)
        key = object()
        notifications = params.notifications
        wanted = (notifications.resource_subscriptions or []) if notifications is not None else []
        subscribed = []
        token = current_agent.set(agent)
        try:
            for uri in wanted[:100]:
                try:
                    subscribed.append(await self._subscribe(agent, uri, key))
                except MCPError:
                    continue  # not this agent's to hear of
            return await self._listen(ctx, params)
        finally:
            current_agent.reset(token)
            for server_name, own in subscribed:
                await self.updates.remove(server_name, own, key)

    async def subscribe_resource(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        """`resources/subscribe` (2025 era): the session hears of the resource's updates."""
        agent = _agent(ctx)
        session_id = self._session_id(ctx)
        if not session_id:
            raise MCPError(INVALID_PARAMS, "resources/subscribe needs a session (Mcp-Session-Id)")
        await self._subscribe(agent, params.uri, session_id, ctx.session)
        return types.EmptyResult()

    async def unsubscribe_resource(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        agent = _agent(ctx)
        server, own = await self._subscribed_resource(agent, params.uri)
        await self.updates.remove(server.name, own, self._session_id(ctx) or "")
        return types.EmptyResult()

    async def _subscribe(self, agent: AgentInfo, uri: str, key: object, session: Any = None) -> tuple[str, str]:
        """`agent` hears of updates to the resource it calls `uri` (updates.py), under `key`;
        (server, the server's URI), or MCPError when it names none of its view's."""
        server, own = await self._subscribed_resource(agent, uri)
        pool = await apool_for(server)
        await self.updates.add(pool, server.name, own, key, Subscriber(agent.pk, uri, session))
        return server.name, own

    async def _subscribed_resource(self, agent: AgentInfo, uri: str) -> tuple[Any, str]:
        catalog = await self.catalog.get()
        try:
            return catalog.offers.route(agent, uri)
        except LookupError as exc:
            raise MCPError(INVALID_PARAMS, str(exc), {"uri": uri}) from None

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        agent = _agent(ctx)
        self._remember(ctx, agent)
        catalog = await self.catalog.get()
        self.notices.given(agent.pk, TOOLS, catalog.fingerprint(agent))
        return types.ListToolsResult(tools=[*catalog.listed(agent), _status_tool()])

    # -- prompts, resources, completions (agent_offers.py; reads on record: calls/reads.py) ----

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        agent = _agent(ctx)
        self._remember(ctx, agent)
        catalog = await self.catalog.get()
        self.notices.given(agent.pk, PROMPTS, catalog.offers.fingerprints(agent)[0])
        return types.ListPromptsResult(prompts=catalog.offers.listed_prompts(agent))

    async def get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        agent = _agent(ctx)
        catalog = await self.catalog.get()
        entry = catalog.offers.find_prompt(agent, params.name)
        if entry is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name}")
        rounds = _read_rounds(ctx, params)
        outcome = await self._read(reads.aget_prompt(entry.row, params.arguments, self._requester(agent), rounds))
        if input_required(outcome):
            return _handed(outcome, {})
        result = dict(outcome)
        result["messages"] = agent_content(agent, entry.server, result.get("messages"))
        return types.GetPromptResult.model_validate(_without_meta(result))

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        agent = _agent(ctx)
        self._remember(ctx, agent)
        catalog = await self.catalog.get()
        self.notices.given(agent.pk, RESOURCES, catalog.offers.fingerprints(agent)[1])
        return types.ListResourcesResult(resources=catalog.offers.listed_resources(agent))

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        agent = _agent(ctx)
        catalog = await self.catalog.get()
        return types.ListResourceTemplatesResult(resource_templates=catalog.offers.listed_templates(agent))

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        agent = _agent(ctx)
        catalog = await self.catalog.get()
        try:
            server, uri = catalog.offers.route(agent, params.uri)
        except LookupError as exc:  # resource not found (SEP-2164: -32602, the URI in data)
            raise MCPError(INVALID_PARAMS, str(exc), {"uri": params.uri}) from None
        rounds = _read_rounds(ctx, params)
        outcome = await self._read(reads.aread_resource(server, uri, self._requester(agent), rounds), params.uri)
        if input_required(outcome):
            return _handed(outcome, {})
        result = dict(outcome)
        result["contents"] = agent_content(agent, server.name, result.get("contents"))
        return types.ReadResourceResult.model_validate(_without_meta(result))

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        """Completions from the server that owns the prompt or template (none for one outside
        the agent's view: to it, that does not exist)."""
        agent = _agent(ctx)
        catalog = await self.catalog.get()
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            entry = catalog.offers.find_prompt(agent, ref.name)
            if entry is None:
                raise MCPError(INVALID_PARAMS, f"Unknown prompt: {ref.name}")
            server, upstream = entry.row.server, {"type": "ref/prompt", "name": entry.row.original_name}
        else:
            try:
                server, uri = catalog.offers.route_template(agent, ref.uri)
            except LookupError as exc:
                raise MCPError(INVALID_PARAMS, str(exc)) from None
            upstream = {"type": "ref/resource", "uri": uri}
        context = params.context.arguments if params.context is not None else None
        pool = await apool_for(server)
        try:
            result = await pool.acomplete(
                server.name, upstream, {"name": params.argument.name, "value": params.argument.value}, context
            )
        except McpFailure as exc:
            raise _mcp_error(exc) from None
        return types.CompleteResult.model_validate(_without_meta(result))

    @staticmethod
    def _requester(agent: AgentInfo) -> calls.Requester:
        return calls.Requester(Call.AGENT, agent.name, agent=agent)

    @staticmethod
    async def _read(reading: Any, uri: str | None = None) -> dict[str, Any]:
        """A read's result, or the MCPError the agent is answered with (`uri`: the resource as
        the agent named it)."""
        try:
            outcome = await reading
        except reads.ReadError as exc:
            raise MCPError(INVALID_PARAMS if exc.status in (400, 404) else REFUSED, exc.message) from None
        if outcome.failure is not None:
            raise _mcp_error(outcome.failure, uri)
        return outcome.result or {}

    def forget_routes(self) -> None:
        self.routes.clear()
        self._routes_generation += 1

    async def catalog_changed(self) -> None:
        """The catalog may have changed: reload it, and tell each connected agent whose lists
        changed (both eras)."""
        self.forget_routes()
        self.catalog.invalidate()
        await self._tell_changes(self.notices.connected())

    async def views_changed(self, load: Any) -> None:
        """Some agents' views may have changed (`token.changed`): `load(pks)` reads the
        current agents of those tokens (the revoked left out); each whose lists changed is told."""
        agents = self.notices.connected()
        if not agents:
            return
        fresh: dict[int, AgentInfo] = await sync_to_async(load, thread_sensitive=False)(set(agents))
        self.notices.replace(fresh, gone=set(agents) - set(fresh))
        await self._tell_changes(fresh)

    async def _tell_changes(self, agents: dict[int, AgentInfo]) -> None:
        """Tell each of `agents` which of its lists differ from what it was last given."""
        catalog = await self.catalog.get()
        told: dict[str, set[int]] = {TOOLS: set(), PROMPTS: set(), RESOURCES: set()}
        for pk, agent in agents.items():
            for what in self.notices.changed(pk, _fingerprints(catalog, agent)):
                told[what].add(pk)
        for what, pks in told.items():
            await self.notices.tell(pks, what)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        agent = _agent(ctx)
        self._remember(ctx, agent)
        name = params.name
        # Checked, sent and kept as the ledger can keep them (`calls.actions.start_call` too).
        arguments = storable(params.arguments or {})
        if name == STATUS_TOOL:
            return await self._status(agent, arguments)
        catalog: Catalog = await self.catalog.get()
        entry = catalog.find_any(agent, name)
        if entry is None:
            return _text_result(f"Unknown tool: {name}", is_error=True)
        name = entry.exposed_name  # the catalog's name, whatever the agent calls it
        requester = calls.Requester(Call.AGENT, agent.name, agent=agent)
        ref = _CallRef(asyncio.get_running_loop())
        watch = self._watch(ctx, params, ref)
        rounds = _hands_rounds(ctx)
        # Answers to a round handed out come back with its state; answers without one go to
        # the server with a new call (`_round`), which asks again for what they leave out.
        if rounds and entry.visible_to(agent) and params.request_state is not None:
            return await self._next_round(params, agent, name, watch)
        # Outside the agent's view (or blocked): the ledger records the refusal, and to the
        # agent the tool does not exist.
        fresh = self._fresh_route(name, arguments) if entry.visible_to(agent) and not rounds else None
        if fresh is not None:
            return await self._run_read_only(*fresh, requester, arguments, watch, ref)
        generation, read_at = self._routes_generation, time.monotonic()
        try:
            call = await sync_to_async(calls.start_call, thread_sensitive=False)(name, arguments, requester, run=False)
        except calls.CallError as exc:
            if exc.status == 404:
                return _text_result(f"Unknown tool: {params.name}", is_error=True)
            details = "; ".join(f"{e['path'] or '(arguments)'}: {e['message']}" for e in exc.errors[:10])
            return _text_result(exc.message + (f" ({details})" if details else ""), is_error=True)
        if call.decision == Call.RUN and call.status == Call.RUNNING:
            assert call.tool is not None
            if generation == self._routes_generation:
                decision = Decision(call.decision, call.decision_reason)
                self.routes[name] = Route(call.tool, decision, read_at, calls.schema_key(call.tool.input_schema))
            ref.call_id = call.pk
            if rounds:
                return await self._round(call, agent, watch, Rounds(_answers(params) or None))
            call = await calls.arun_now(call, watch)
            return result_for(call, agent)
        return await self._await(ctx, call, agent)

    async def _round(
        self, call: Call, agent: AgentInfo, watch: CallWatch, rounds: Rounds
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run the agent's call (a 2026-07-28 agent that answers its rounds of input itself):
        the server's answer, or its round of input requests handed on as they are, with the
        server's state and the call sealed in ours (the boundary seals it). The requests for
        input are on record (`inputs.open_round`), answered when the agent comes back."""
        tool = call.tool
        assert tool is not None
        pool = await apool_for(tool.server)
        started = time.perf_counter()
        result: dict[str, Any] | None = None
        failure: McpFailure | None = None
        try:
            result = await pool.acall_tool(
                tool.server.name, call.original_name, call.arguments, watch=calls.shown(call.pk, watch), rounds=rounds
            )
            failure = None if input_required(result) else result_failure(result, call.original_name)
        except McpFailure as exc:
            failure = exc
        if result is not None and input_required(result):
            requests = result.get("inputRequests") or {}
            try:
                rows = await sync_to_async(inputs.open_round, thread_sensitive=False)(
                    call.pk, tool.server.name, requests
                )
            except inputs.InvalidAsk as exc:
                result, failure = None, exc.failure()
            else:
                return _handed(result, {"call": call.pk, "inputs": rows})
        done = await sync_to_async(life.finish, thread_sensitive=False)(
            call, result, failure, time.perf_counter() - started
        )
        return result_for(done, agent)

    async def _next_round(
        self, params: types.CallToolRequestParams, agent: AgentInfo, name: str, watch: CallWatch
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The agent is back with its answers to a round `_round` handed it (the boundary has
        checked and opened the state): on record, then on to the server with them."""
        held = _held(params)
        found_id = held.get("call")
        call_id = found_id if isinstance(found_id, int) else 0

        def load() -> Call | None:
            found = Call.objects.select_related("tool", "tool__server")
            return found.filter(pk=call_id, requester_agent_id=agent.pk, tool_name=name).first()

        call = await sync_to_async(load, thread_sensitive=False)()
        if call is None or call.tool is None or call.status not in (Call.INPUT, Call.RUNNING):
            return _text_result("This round of input belongs to no call of yours that waits for it.", is_error=True)
        responses = _answers(params)
        await sync_to_async(inputs.answer_round, thread_sensitive=False)(call.pk, held.get("inputs") or {}, responses)
        call = await sync_to_async(load, thread_sensitive=False)()
        if call is None or call.tool is None or call.status != Call.RUNNING:
            return result_for(call, agent) if call is not None else _text_result("The call is gone.", is_error=True)
        return await self._round(call, agent, watch, Rounds(responses, held.get("state")))

    def _fresh_route(self, name: str, arguments: dict[str, Any]) -> tuple[Route, Pool] | None:
        """The tool's route, and the pool running its server, if its call may go to the server
        before its row is written."""
        route = self.routes.get(name)
        if route is None or time.monotonic() - route.read_at >= POLICY_FRESH:
            return None
        pool = current_pool(route.tool.server)
        if pool is None or calls.check_arguments(route.schema, arguments):
            return None  # the path that writes first starts the server, or says what is wrong
        return route, pool

    async def _run_read_only(
        self, route: Route, pool: Pool, requester: Any, arguments: dict[str, Any], watch: CallWatch, ref: _CallRef
    ) -> types.CallToolResult:
        """Call the server, write the call, answer (see the module's doc). A request for
        input during the call writes it as running first (`ref`)."""
        tool = route.tool
        started_at, started = timezone.now(), time.perf_counter()
        running: asyncio.Future[Call] | None = None

        async def ensure_running() -> int:
            nonlocal running
            if running is None:
                running = asyncio.ensure_future(
                    sync_to_async(calls.record_running, thread_sensitive=False)(
                        tool, route.decision, requester, arguments, started_at
                    )
                )
            return (await asyncio.shield(running)).pk

        ref.ensure = ensure_running
        upstream = asyncio.ensure_future(pool.acall_tool(tool.server.name, tool.original_name, arguments, watch=watch))
        result: dict[str, Any] | None = None
        failure: McpFailure | None = None
        try:
            done, _ = await asyncio.wait({upstream}, timeout=RUNNING_VISIBLE_AFTER)
            if not done:
                await ensure_running()
            try:
                result = await upstream
                failure = result_failure(result, tool.original_name)
            except McpFailure as exc:
                failure = exc
            except Exception as exc:  # boundary: a pool closing under the call, say; on record all the same
                logger.exception("a read-only call to %s failed in the host", tool.exposed_name)
                failure = errors.ambiguous_error(f"the host could not finish the call: {exc}", reason="internal")
        except asyncio.CancelledError:
            upstream.cancel()
            self._record_cancelled(route, requester, arguments, started_at, time.perf_counter() - started, running)
            raise
        except Exception:  # the running row could not be written: no call goes on off the record
            logger.exception("a read-only call to %s was given up: it could not be recorded", tool.exposed_name)
            upstream.cancel()
            raise
        seconds = time.perf_counter() - started
        if running is not None:
            call = await sync_to_async(life.finish, thread_sensitive=False)(running.result(), result, failure, seconds)
        else:
            call = await sync_to_async(calls.record_ran, thread_sensitive=False)(
                tool, route.decision, requester, arguments, started_at, result, failure, seconds
            )
        return result_for(call, requester.agent)

    def _record_cancelled(
        self,
        route: Route,
        requester: Any,
        arguments: dict[str, Any],
        started_at: Any,
        seconds: float,
        running: asyncio.Future[Call] | None,
    ) -> None:
        """The agent went away mid-call: the row says so (the server may have answered),
        written in the background (the request that would have waited for it is gone)."""
        failure = errors.ambiguous_error("the agent went away before the call finished", reason="cancelled")

        async def record() -> None:
            call = None
            if running is not None:
                try:
                    call = await asyncio.shield(running)
                except Exception:  # boundary: not on record as running; on record as it ended
                    call = None
            if call is not None:
                await sync_to_async(life.finish, thread_sensitive=False)(call, None, failure, seconds)
            else:
                await sync_to_async(calls.record_ran, thread_sensitive=False)(
                    route.tool, route.decision, requester, arguments, started_at, None, failure, seconds
                )

        task = asyncio.ensure_future(record())
        self._background.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Future[Any]) -> None:
        """A row written in the background: what was lost, if it could not be, is logged."""
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("a call the agent gave up on is not on record", exc_info=task.exception())

    def calls_moved(self, events: Any) -> None:
        """Calls moved somewhere (any process: `call.changed` from the channel layer): wake
        the agents that wait for them."""
        for event in events:
            data = event.get("data") or {}
            ids = data.get("ids") or ([data["id"]] if "id" in data else [])
            for call_id in ids:
                for moved in self._waiting.get(call_id, ()):
                    moved.set()

    async def _await(self, ctx: Any, call: Call, agent: AgentInfo) -> types.CallToolResult:
        """Wait for the call to finish, up to the limit, telling the agent how it goes. Woken
        by its moves (`calls_moved`); read again at least every `RECHECK` in any case (a move
        whose event was lost: Redis down)."""
        started = time.monotonic()
        limit = (
            settings.PATCHBAY_AGENT_APPROVAL_WAIT if call.status == Call.WAITING else settings.PATCHBAY_AGENT_WRITE_WAIT
        )
        last_progress = 0.0
        ticks = 0
        status = call.status
        moved = asyncio.Event()
        self._waiting.setdefault(call.pk, set()).add(moved)
        moved.set()  # read it again at once: it may have moved before this wait was heard of
        try:
            while call.status in (Call.WAITING, Call.QUEUED, Call.RUNNING, Call.INPUT):
                now = time.monotonic()
                if now - started >= limit:
                    break
                if now - last_progress >= PROGRESS_EVERY:
                    ticks += 1
                    await ctx.session.report_progress(ticks, None, f"Call #{call.pk} is {_WAITING_FOR[call.status]}")
                    last_progress = now
                wake = min(RECHECK, PROGRESS_EVERY - (now - last_progress), limit - (now - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(moved.wait(), timeout=max(0.0, wake))
                moved.clear()
                call = await sync_to_async(Call.objects.get, thread_sensitive=False)(pk=call.pk)
                if status == Call.WAITING and call.status != Call.WAITING:
                    # Approved: the delivery gets its own time.
                    started, limit = time.monotonic(), settings.PATCHBAY_AGENT_WRITE_WAIT
                if call.status == Call.INPUT and status != Call.INPUT:
                    # Its server waits for a person's input: as long as the host lets it wait.
                    started = time.monotonic()
                    limit = settings.PATCHBAY_INPUT_WAIT + settings.PATCHBAY_AGENT_WRITE_WAIT
                status = call.status
        finally:
            waiters = self._waiting.get(call.pk)
            if waiters is not None:
                waiters.discard(moved)
                if not waiters:
                    del self._waiting[call.pk]
        return result_for(call, agent)

    async def _status(self, agent: AgentInfo, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            call_id = int(arguments["call_id"])
        except (KeyError, TypeError, ValueError):
            return _text_result("call_id must be a whole number", is_error=True)
        call = await sync_to_async(
            lambda: Call.objects.filter(pk=call_id, requester_agent_id=agent.pk).first(), thread_sensitive=False
        )()
        if call is None:
            return _text_result(f"You have no call #{call_id}.", is_error=True)
        summary = {"call_id": call.pk, "tool": call.tool_name, "status": call.status}
        if call.ended:
            final = result_for(call, agent)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(summary)), *final.content],
                structured_content={**summary, "is_error": bool(final.is_error)},
                is_error=bool(final.is_error),
            )
        return _text_result(json.dumps(summary), structured=summary)
