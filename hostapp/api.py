"""The JSON API: servers, tools, calls, approvals, requests for input and the outbox,
described by OpenAPI.

Served at /api/v1/ (schema at /api/v1/openapi.json). Two ways in:

* a browser session (cookie), with CSRF enforced on every unsafe method;
* an agent token (`Authorization: Bearer pb_...`): an agent may read the catalog, make
  calls and read its own calls (and the requests for input they wait for); it can never
  decide an approval, answer a request for input, or touch the outbox.

Errors are `{"error": "..."}` with the status that fits (400, 401, 403, 404, 409).
"""

from __future__ import annotations

from datetime import datetime
from functools import wraps
from typing import Any, Literal

from django.db.models import Q
from django.http import HttpRequest, JsonResponse
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import APIKeyCookie, HttpBearer

from hostapp.calls import actions as call_actions
from hostapp.calls import inputs as call_inputs
from hostapp.calls import suggest
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.models import Server, Tool, live_states
from hostapp.catalog.refreshes import queue_refresh
from hostapp.catalog.rows import server_row, tool_row
from hostapp.gateway.tokens import authenticate
from hostapp.outbox import actions as outbox_actions
from hostapp.outbox.models import Action
from hostapp.outbox.rows import action_row


class SessionAuth(APIKeyCookie):
    """A logged-in browser session; CSRF is checked on unsafe methods."""

    param_name = "sessionid"

    def _get_key(self, request: HttpRequest) -> str | None:
        # No session cookie: not this method's request (a bearer token may follow).
        # With one, CSRF is checked before anything else.
        if self.param_name not in request.COOKIES:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            request.api_agent = None  # type: ignore[attr-defined]
            return user
        return None


class AgentAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        agent = authenticate(token)
        if agent is not None:
            request.api_agent = agent  # type: ignore[attr-defined]
        return agent


def _schema_needs_login(view: Any) -> Any:
    """The schema, like every route, is for a session or an agent token."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            auth = request.headers.get("Authorization", "")
            if not (auth.startswith("Bearer ") and AgentAuth().authenticate(request, auth[7:].strip())):
                response = JsonResponse({"error": "log in, or send Authorization: Bearer <agent token>"}, status=401)
                response["WWW-Authenticate"] = 'Bearer realm="patchbay"'
                return response
        return view(request, *args, **kwargs)

    return wrapper


api = NinjaAPI(
    title="Patchbay API",
    version="1",
    description=__doc__,
    auth=[SessionAuth(), AgentAuth()],
    docs_url=None,
    docs_decorator=_schema_needs_login,
    urls_namespace="api",
)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: Exception) -> Any:
    response = api.create_response(
        request, {"error": "log in, or send Authorization: Bearer <agent token>"}, status=401
    )
    response["WWW-Authenticate"] = 'Bearer realm="patchbay"'
    return response


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> Any:
    first = exc.errors[0] if exc.errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path"))
    message = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid input"))
    return api.create_response(request, {"error": message}, status=400)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> Any:
    return api.create_response(request, {"error": str(exc)}, status=exc.status_code)


class Error(Schema):
    error: str


# Every operation may answer these (bad input, no credentials, not allowed).
COMMON = {400: Error, 401: Error, 403: Error}


def responses(ok: Any, status: int = 200, **extra: Any) -> dict[int, Any]:
    out: dict[int, Any] = {status: ok, **COMMON}
    for code in extra.get("codes", ()):
        out[code] = Error
    return out


def _agent(request: HttpRequest) -> Any:
    return getattr(request, "api_agent", None)


def _user(request: HttpRequest) -> Any:
    """The session user, or 403 for an agent token."""
    if _agent(request) is not None:
        raise HttpError(403, "agent tokens cannot do this; a person must")
    return request.user


def _require(request: HttpRequest, perm: str) -> Any:
    user = _user(request)
    if not user.has_perm(perm):
        raise HttpError(403, f"this needs the {perm} permission")
    return user


# --- servers ------------------------------------------------------------------------


class ProcessStateOut(Schema):
    process: str
    role: str
    state: str
    since: datetime
    last_error: str | None


class ServerOut(Schema):
    name: str
    transport: str
    state: str = Field(description="The worst state a live process reports (or idle, or disabled).")
    protocol_version: str
    tool_count: int
    trusted: bool
    enabled: bool
    stale: bool
    last_error: str | None
    processes: list[ProcessStateOut] = Field(
        description="Each live process's own state of the server (for people; empty for an agent token)."
    )


def _server_out(request: HttpRequest, server: Server, tool_count: int) -> dict[str, Any]:
    """A server as the API shows it; an agent is not told the host's processes."""
    row = server_row(server, tool_count)
    if _agent(request) is not None:
        row["processes"] = []
    return row


@api.get("/servers", response=responses(list[ServerOut]), tags=["servers"])
def list_servers(request: HttpRequest) -> list[dict[str, Any]]:
    agent = _agent(request)
    servers = Server.objects.order_by("name")
    if agent is not None and agent.servers:
        servers = servers.filter(name__in=agent.servers)
    return [_server_out(request, s, s.n_tools) for s in servers.listed()]


def _server(request: HttpRequest, name: str) -> Server:
    agent = _agent(request)
    server = Server.objects.prefetch_related(live_states()).filter(name=name).first()
    if server is None or (agent is not None and not agent.may_use(name)):
        raise HttpError(404, f"no server named {name!r}")
    return server


@api.get("/servers/{name}", response=responses(ServerOut, codes=[404]), tags=["servers"])
def get_server(request: HttpRequest, name: str) -> dict[str, Any]:
    server = _server(request, name)
    return _server_out(request, server, server.tools.count())


class Queued(Schema):
    queued: bool


@api.post("/servers/{name}/refresh", response=responses(Queued, 202, codes=[404]), tags=["servers"])
def refresh_server(request: HttpRequest, name: str) -> Status:
    _user(request)
    server = _server(request, name)
    return Status(202, {"queued": queue_refresh(server.name, reason="asked through the API", countdown=0)})


# --- tools ------------------------------------------------------------------------------


class ToolOut(Schema):
    name: str
    server: str
    original_name: str
    title: str
    description: str
    effective_class: str
    annotations: dict[str, Any]
    claimed_annotations: dict[str, Any]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    status: str
    agent_name: str | None = None
    agent_description: str | None = None


class ToolFilters(Schema):
    server: str | None = None
    status: Literal["active", "quarantined"] | None = None
    effective_class: Literal["read_only", "write", "destructive"] | None = None
    q: str | None = None
    limit: int = Field(500, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=2**31 - 1)


@api.get("/tools", response=responses(list[ToolOut]), tags=["tools"])
def list_tools(request: HttpRequest, filters: Query[ToolFilters]) -> list[dict[str, Any]]:
    tools = Tool.objects.select_related("server").order_by("exposed_name")
    agent = _agent(request)
    if agent is not None:
        tools = tools.filter(status=Tool.ACTIVE)
        if agent.servers:
            tools = tools.filter(server__name__in=agent.servers)
    if filters.server:
        tools = tools.filter(server__name=filters.server)
    if filters.status:
        tools = tools.filter(status=filters.status)
    if filters.effective_class:
        tools = tools.filter(effective_class=filters.effective_class)
    if filters.q:
        tools = tools.filter(Q(exposed_name__icontains=filters.q) | Q(description__icontains=filters.q))
    limit = max(1, min(filters.limit, 1000))
    offset = max(0, filters.offset)
    if agent is not None and agent.view.narrowed:  # its view, as its /mcp list shows it
        seen = [t for t in tools if agent.sees_tool(t)]
        return [tool_row(t) for t in seen[offset : offset + limit]]
    return [tool_row(t) for t in tools[offset : offset + limit]]


@api.get("/tools/{name}", response=responses(ToolOut, codes=[404]), tags=["tools"])
def get_tool(request: HttpRequest, name: str) -> dict[str, Any]:
    tool = Tool.objects.select_related("server").filter(exposed_name=name).first()
    agent = _agent(request)
    if tool is None or (agent is not None and (not agent.sees_tool(tool) or tool.status != Tool.ACTIVE)):
        raise HttpError(404, f"no tool named {name!r}")
    return tool_row(tool)


# --- calls ------------------------------------------------------------------------------------


class CallIn(Schema):
    tool: str
    arguments: dict[str, Any] = {}


class BasisOut(Schema):
    call_id: int
    approval: Literal["approved", "denied"]
    weight: float


class SuggestionOut(Schema):
    """What a person would likely answer (hostapp/calls/suggest.py), made when the call began to wait."""

    verdict: Literal["allow", "ask", "block"]
    probability: float | None
    basis: list[BasisOut]
    evidence: float | None
    reason: str


class CallOut(Schema):
    call_id: int
    tool: str
    server: str
    status: str
    decision: str
    requester: str
    requester_kind: str
    created_at: datetime
    finished_at: datetime | None
    attempts: int
    arguments: dict[str, Any]
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    is_error: bool
    denial_reason: str | None
    approval_expires_at: datetime | None
    suggestion: SuggestionOut | None = None
    input_requests: list[int] = Field(
        [],
        description="While the call waits for input (status `input`): the ids of its server's open requests, "
        "answered at /inputs/{input_id}/answer.",
    )


class CallError(Schema):
    error: str
    errors: list[dict[str, str]] = []


def _open_inputs(calls: list[Call]) -> dict[int, list[int]]:
    """The open requests for input of these calls, by call: one query, and none unless one
    of them waits for input (only such a call has open requests)."""
    waiting = [c.pk for c in calls if c.status == Call.INPUT]
    found: dict[int, list[int]] = {}
    if waiting:
        rows = InputRequest.objects.filter(call_id__in=waiting, status=InputRequest.OPEN).order_by("id")
        for call_id, input_id in rows.values_list("call_id", "id"):
            found.setdefault(call_id, []).append(input_id)
    return found


def _calls_out(calls: Any) -> list[dict[str, Any]]:
    calls = list(calls)
    open_inputs = _open_inputs(calls)
    return [_call_out(c, open_inputs.get(c.pk, [])) for c in calls]


def _call_out(call: Call, input_requests: list[int] | None = None) -> dict[str, Any]:
    """A call as the API shows it (`input_requests`: from `_open_inputs`, or read here)."""
    if input_requests is None:
        input_requests = _open_inputs([call]).get(call.pk, [])
    return {
        "call_id": call.pk,
        "tool": call.tool_name,
        "server": call.server_name,
        "status": call.status,
        "decision": call.decision,
        "requester": call.requester_name,
        "requester_kind": call.requester_kind,
        "created_at": call.created_at,
        "finished_at": call.finished_at,
        "attempts": call.attempts,
        "arguments": call.arguments,
        "result": call.result,
        "error": call.error,
        "is_error": call.is_error,
        "denial_reason": call.denial_reason or None,
        "approval_expires_at": call.approval_expires_at,
        "suggestion": suggest.shown(call),
        "input_requests": input_requests,
    }


@api.post(
    "/calls",
    response={200: CallOut, 201: CallOut, 400: CallError, 401: Error, 403: Error, 404: CallError},
    tags=["calls"],
)
def make_call(request: HttpRequest, payload: CallIn) -> Status:
    """Start a call (201). With an `Idempotency-Key` header (up to 64 characters) sent before
    by the same requester, the first call is answered (200) and nothing is done again.

    A call run at once whose server asks for input is answered as soon as it asks: status
    `input`, with the requests' ids in `input_requests` (answered at /inputs/{input_id}/answer);
    it goes on once they are answered. Read it again for its end."""
    agent = _agent(request)
    if agent is not None:
        requester = call_actions.Requester(Call.AGENT, agent.name, agent=agent)
    else:
        requester = call_actions.Requester.for_user(request.user)
    key = request.headers.get("Idempotency-Key", "").strip()
    try:
        call = call_actions.start_call(payload.tool, payload.arguments, requester, submit_key=key)
    except call_actions.Submitted as repeat:
        return Status(200, _call_out(repeat.call))
    except call_actions.CallError as exc:
        return Status(404 if exc.status == 404 else 400, {"error": exc.message, "errors": exc.errors})
    return Status(201, _call_out(call))


class CallFilters(Schema):
    status: str | None = None
    server: str | None = None
    tool: str | None = None
    requester: str | None = None
    limit: int = Field(50, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=2**31 - 1)


def _calls_for(request: HttpRequest) -> Any:
    calls = Call.objects.order_by("-id")
    agent = _agent(request)
    if agent is not None:
        calls = calls.filter(requester_agent=agent)
    return calls


@api.get("/calls", response=responses(list[CallOut]), tags=["calls"])
def list_calls(request: HttpRequest, filters: Query[CallFilters]) -> list[dict[str, Any]]:
    calls = _calls_for(request)
    for field, column in (
        ("status", "status"),
        ("server", "server_name"),
        ("tool", "tool_name"),
        ("requester", "requester_name"),
    ):
        value = getattr(filters, field)
        if value:
            calls = calls.filter(**{column: value})
    limit = max(1, min(filters.limit, 500))
    offset = max(0, filters.offset)
    return _calls_out(calls[offset : offset + limit])


@api.get("/calls/{call_id}", response=responses(CallOut, codes=[404]), tags=["calls"])
def get_call(request: HttpRequest, call_id: int) -> dict[str, Any]:
    call = _calls_for(request).filter(pk=call_id).first()
    if call is None:
        raise HttpError(404, f"no call #{call_id}")
    return _call_out(call)


# --- approvals ------------------------------------------------------------------------------------


@api.get("/approvals", response=responses(list[CallOut]), tags=["approvals"])
def list_approvals(request: HttpRequest) -> list[dict[str, Any]]:
    _user(request)
    return _calls_out(Call.objects.filter(status=Call.WAITING).order_by("id"))


class ApproveIn(Schema):
    always: bool = False


class DenyIn(Schema):
    reason: str


@api.post("/approvals/{call_id}/approve", response=responses(CallOut, codes=[404, 409]), tags=["approvals"])
def approve_call(request: HttpRequest, call_id: int, payload: ApproveIn) -> Any:
    user = _require(request, "calls.approve_call")
    try:
        call = call_actions.approve(call_id, user, always_allow=payload.always)
    except Call.DoesNotExist:
        raise HttpError(404, f"no call #{call_id}") from None
    except call_actions.ApprovalError as exc:
        raise HttpError(409, str(exc)) from None
    return _call_out(call)


@api.post(
    "/approvals/{call_id}/deny",
    response=responses(CallOut, codes=[404, 409]),
    tags=["approvals"],
)
def deny_call(request: HttpRequest, call_id: int, payload: DenyIn) -> Any:
    user = _require(request, "calls.approve_call")
    if not payload.reason.strip():
        raise HttpError(400, "a denial needs a reason: the caller receives it")
    try:
        call = call_actions.deny(call_id, user, payload.reason)
    except Call.DoesNotExist:
        raise HttpError(404, f"no call #{call_id}") from None
    except call_actions.ApprovalError as exc:
        raise HttpError(409, str(exc)) from None
    return _call_out(call)


# --- requests for input ---------------------------------------------------------------------------------


class InputOut(Schema):
    """A server's request for input in the middle of a call (elicitation), and its answer."""

    id: int
    call_id: int
    server: str
    mode: Literal["form", "url"] = Field(description="`form`: fill in `requested_schema`; `url`: open `url`.")
    message: str = Field(description="What the server says it needs (sanitized; show it as text).")
    requested_schema: dict[str, Any] | None = Field(
        description="A form's fields: a flat object schema of strings, numbers, booleans and choices."
    )
    url: str | None = Field(description="The http(s) page a `url` request asks the person to open.")
    sensitive: bool = Field(description="The form seems to ask for a secret (forms must not be used for one).")
    status: Literal["open", "accept", "decline", "cancel", "expired", "withdrawn"]
    round: int = Field(description="1 for the first request of its call, 2 for the next, ...")
    created_at: datetime
    expires_at: datetime = Field(description="When the host stops waiting and answers `cancel` for the person.")
    answered_via: Literal["person", "agent", "host"] | None
    answered_by: str | None
    answered_at: datetime | None
    content: dict[str, Any] | None = Field(
        None, description="The values given (an accepted form): only for whoever may answer, otherwise null."
    )


class AnswerIn(Schema):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = Field(
        None, description="With `accept` of a form: its values, checked against `requested_schema`."
    )


class FieldProblem(Schema):
    path: str = Field(description="The field it concerns (empty: the answer as a whole).")
    message: str


class AnswerError(Schema):
    error: str
    errors: list[FieldProblem] = []


def _input(request: HttpRequest, input_id: int) -> InputRequest:
    """The request, or 404: a person sees every call's, an agent only its own calls'."""
    row = InputRequest.objects.select_related("call").filter(pk=input_id).first()
    agent = _agent(request)
    if row is None or (agent is not None and row.call.requester_agent_id != agent.pk):
        raise HttpError(404, f"no input request #{input_id}")
    return row


def _input_out(row: InputRequest, *, content: bool) -> dict[str, Any]:
    return {**row.summary(), "content": row.content if content else None}


def _may_answer(request: HttpRequest, row: InputRequest) -> bool:
    return _agent(request) is None and call_inputs.can_answer(request.user, row.call)


@api.get("/inputs", response=responses(list[InputOut]), tags=["inputs"])
def list_inputs(request: HttpRequest) -> list[dict[str, Any]]:
    """The open requests for input the caller may answer, oldest first: those of the calls
    they asked for, and every one for an approver."""
    user = _user(request)
    return [_input_out(row, content=False) for row in call_inputs.open_requests(user)]


@api.get("/inputs/{input_id}", response=responses(InputOut, codes=[404]), tags=["inputs"])
def get_input(request: HttpRequest, input_id: int) -> dict[str, Any]:
    """One request for input; its answer's `content` only for whoever may answer it."""
    row = _input(request, input_id)
    return _input_out(row, content=_may_answer(request, row))


@api.post(
    "/inputs/{input_id}/answer",
    response={200: InputOut, 400: AnswerError, 401: Error, 403: Error, 404: Error, 409: Error},
    tags=["inputs"],
)
def answer_input(request: HttpRequest, input_id: int, payload: AnswerIn) -> Status:
    """Answer an open request for input: accept (a form with its `content`, checked against
    what was asked: 400 lists every field that does not fit), decline or cancel. 409 when it
    is no longer open (answered, expired, or its call ended). Whoever asked for the call, or
    an approver, may answer; an agent token never."""
    user = _user(request)
    row = _input(request, input_id)
    if not call_inputs.can_answer(user, row.call):
        raise HttpError(403, "only whoever asked for the call, or an approver, may answer its requests for input")
    try:
        row = call_inputs.answer(row.pk, payload.action, payload.content, person=user)
    except InputRequest.DoesNotExist:  # its call was deleted meanwhile
        raise HttpError(404, f"no input request #{input_id}") from None
    except call_inputs.InputError as exc:
        if exc.status == 409:
            raise HttpError(409, exc.message) from None
        return Status(400, {"error": exc.message, "errors": exc.errors})
    return Status(200, _input_out(row, content=True))


# --- outbox ------------------------------------------------------------------------------------------


class ActionOut(Schema):
    id: int
    call_id: int
    tool: str
    status: str
    attempts: int
    next_attempt_at: str | None
    idempotency_key: str
    last_error: str | None


class ActionFilters(Schema):
    status: Literal["pending", "leased", "done", "dead", "unknown", "discarded"] | None = None
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=2**31 - 1)


@api.get("/outbox", response=responses(list[ActionOut]), tags=["outbox"])
def list_outbox(request: HttpRequest, filters: Query[ActionFilters]) -> list[dict[str, Any]]:
    _user(request)
    rows = Action.objects.select_related("call").order_by("-id")
    if filters.status:
        rows = rows.filter(status=filters.status)
    limit = max(1, min(filters.limit, 500))
    return [action_row(a) for a in rows[max(0, filters.offset) : max(0, filters.offset) + limit]]


class DiscardIn(Schema):
    reason: str


def _outbox_do(request: HttpRequest, fn: Any, *args: Any) -> dict[str, Any]:
    user = _require(request, "outbox.manage_outbox")
    try:
        action = fn(args[0], user.get_username(), *args[1:])
    except Action.DoesNotExist:
        raise HttpError(404, f"no action #{args[0]}") from None
    except outbox_actions.OutboxError as exc:
        raise HttpError(409, str(exc)) from None
    action.refresh_from_db()
    return action_row(Action.objects.select_related("call").get(pk=action.pk))


@api.post("/outbox/{action_id}/redrive", response=responses(ActionOut, codes=[404, 409]), tags=["outbox"])
def redrive_action(request: HttpRequest, action_id: int) -> dict[str, Any]:
    return _outbox_do(request, outbox_actions.redrive, action_id)


@api.post(
    "/outbox/{action_id}/discard",
    response=responses(ActionOut, codes=[404, 409]),
    tags=["outbox"],
)
def discard_action(request: HttpRequest, action_id: int, payload: DiscardIn) -> dict[str, Any]:
    if not payload.reason.strip():
        raise HttpError(400, "discarding needs a reason")
    return _outbox_do(request, outbox_actions.discard, action_id, payload.reason)


@api.post("/outbox/{action_id}/resolve", response=responses(ActionOut, codes=[404, 409]), tags=["outbox"])
def resolve_action(request: HttpRequest, action_id: int) -> dict[str, Any]:
    return _outbox_do(request, outbox_actions.mark_done, action_id)
