"""Requests for input during a call: a server asks (elicitation), a person or the agent's
own client answers, and the answer goes back to the call wherever it runs.

Every write of an `InputRequest` is here. A request is made by whoever runs the call (the
web process, a worker, the agents' endpoint) when its server asks: the row, and the call
moved to `input` (`life`). It is answered by a person (`answer`: the browser, the CLI, the
API), or by the agent's client; given up on when nobody answers within
`PATCHBAY_INPUT_WAIT` (`expire`: the server is told "cancel"); withdrawn when the call ends
before anyone answered. Once no request of the call is open, the call is running again.

The process that runs the call waits for the answer (`await_answer`): woken at once in the
process that answered, through the channel layer in the agents' endpoint of every web
process (`heard`), and by reading the row again every `RECHECK` seconds anywhere else.

What the server sent is untrusted: its message is sanitized and capped, its schema must be
the flat object of primitive fields the protocol allows (anything else is refused before a
person sees it), a URL must be http(s). The answer is part of the call's record and is
never logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import anyio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from hostapp.core.events import send_event_on_commit
from hostapp.core.jsonvalues import storable
from hostapp.mcp import InputAsk, InputRefused, McpFailure, errors
from hostapp.mcp.elicitation import with_defaults
from hostapp.mcp.sanitize import clean_text

from . import life, notify
from .models import Call, InputRequest

logger = logging.getLogger(__name__)

MESSAGE_CAP = 2000
TEXT_CAP = 500  # a field's title or description
URL_CAP = 4000
SCHEMA_CAP = 64 * 1024  # bytes of JSON
MAX_FIELDS = 50
MAX_OPTIONS = 200
# The row is read again this often by a waiter nobody wakes (a worker; a lost event).
RECHECK = 1.0
# A form that asks for one of these is shown with a warning (form mode must not be used for
# secrets, say the specification's security considerations).
SENSITIVE = re.compile(
    r"pass(word|phrase|code|wd)?|secret|token|api[\s_-]?key|private[\s_-]?key|\bkey\b|\bpin\b|\botp\b|"
    r"credential|\bcvv\b|\bcvc\b|card[\s_-]?number|\bssn\b|social security",
    re.IGNORECASE,
)
FORMATS = ("email", "uri", "date", "date-time")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")

# The event open pages (the Input queue, a call's page, the badge) and waiters hear.
EVENT = "input.changed"


class InputError(Exception):
    """An answer that cannot be given; `status` is the HTTP status a view answers with."""

    def __init__(self, message: str, status: int = 400, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors or []


class InvalidAsk(Exception):
    """What the server asked for cannot be shown to a person (a schema the protocol does not
    allow, a URL that is not http(s)): the server is answered with this error."""

    def failure(self) -> McpFailure:
        """How a request that asked for it ends (a round of input not passed on)."""
        return errors.protocol_error(f"the server asked for input the host will not pass on: {self}")


# --- what the server asked -----------------------------------------------------------------------


def _clean_option(option: Any) -> dict[str, str] | None:
    if isinstance(option, dict) and isinstance(option.get("const"), str):
        return {
            "const": option["const"][:TEXT_CAP],
            "title": clean_text(option.get("title") or option["const"], TEXT_CAP),
        }
    return None


def _clean_field(name: str, spec: Any) -> dict[str, Any]:
    """One property of a requested schema, as the protocol allows it, its texts sanitized."""
    if not isinstance(spec, dict):
        raise InvalidAsk(f"field {name!r} is not an object")
    kind = spec.get("type")
    out: dict[str, Any] = {}
    for text in ("title", "description"):
        if isinstance(spec.get(text), str):
            out[text] = clean_text(spec[text], TEXT_CAP)
    if kind == "array":
        items = spec.get("items")
        if not isinstance(items, dict):
            raise InvalidAsk(f"field {name!r}: a multiple choice needs `items`")
        if isinstance(items.get("enum"), list) and all(isinstance(v, str) for v in items["enum"]):
            clean_items: dict[str, Any] = {
                "type": "string",
                "enum": [v[:TEXT_CAP] for v in items["enum"][:MAX_OPTIONS]],
            }
        elif isinstance(items.get("anyOf"), list):
            options = [_clean_option(o) for o in items["anyOf"][:MAX_OPTIONS]]
            if any(o is None for o in options):
                raise InvalidAsk(f"field {name!r}: each choice needs a string `const`")
            clean_items = {"anyOf": options}
        else:
            raise InvalidAsk(f"field {name!r}: a multiple choice needs `enum` or `anyOf` items")
        out.update(type="array", items=clean_items)
        for bound in ("minItems", "maxItems"):
            if isinstance(spec.get(bound), int) and not isinstance(spec[bound], bool):
                out[bound] = spec[bound]
        if isinstance(spec.get("default"), list):
            out["default"] = [v for v in spec["default"] if isinstance(v, str)]
        return out
    if kind == "string":
        out["type"] = "string"
        if isinstance(spec.get("enum"), list):
            if not all(isinstance(v, str) for v in spec["enum"]):
                raise InvalidAsk(f"field {name!r}: choices must be strings")
            out["enum"] = [v[:TEXT_CAP] for v in spec["enum"][:MAX_OPTIONS]]
            if isinstance(spec.get("enumNames"), list):
                out["enumNames"] = [clean_text(v, TEXT_CAP) for v in spec["enumNames"][:MAX_OPTIONS]]
        elif isinstance(spec.get("oneOf"), list):
            options = [_clean_option(o) for o in spec["oneOf"][:MAX_OPTIONS]]
            if any(o is None for o in options):
                raise InvalidAsk(f"field {name!r}: each choice needs a string `const`")
            out["oneOf"] = options
        if spec.get("format") in FORMATS:
            out["format"] = spec["format"]
        for bound in ("minLength", "maxLength"):
            if isinstance(spec.get(bound), int) and not isinstance(spec[bound], bool):
                out[bound] = spec[bound]
        if isinstance(spec.get("default"), str):
            out["default"] = spec["default"][:URL_CAP]
        return out
    if kind in ("number", "integer"):
        out["type"] = kind
        for bound in ("minimum", "maximum"):
            value = spec.get(bound)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[bound] = value
        default = spec.get("default")
        if isinstance(default, int | float) and not isinstance(default, bool):
            out["default"] = default
        return out
    if kind == "boolean":
        out["type"] = "boolean"
        if isinstance(spec.get("default"), bool):
            out["default"] = spec["default"]
        return out
    raise InvalidAsk(f"field {name!r} has type {kind!r}: a form asks only for strings, numbers, booleans and choices")


def clean_schema(schema: Any) -> dict[str, Any]:
    """The requested schema as it may be shown: a flat object of primitive fields."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise InvalidAsk("the requested schema is not an object")
    if len(json.dumps(schema, default=str)) > SCHEMA_CAP:
        raise InvalidAsk(f"the requested schema is larger than {SCHEMA_CAP} bytes")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict) or len(properties) > MAX_FIELDS:
        raise InvalidAsk(f"the requested schema must have at most {MAX_FIELDS} properties")
    for name in properties:
        if not isinstance(name, str) or not name or len(name) > 200 or clean_text(name, 200) != name:
            raise InvalidAsk(f"field name {str(name)[:50]!r} is not plain text")
    fields = {name: _clean_field(name, spec) for name, spec in properties.items()}
    required = [n for n in schema.get("required") or [] if isinstance(n, str) and n in fields]
    out: dict[str, Any] = {"type": "object", "properties": fields}
    if required:
        out["required"] = required
    return out


def looks_sensitive(schema: dict[str, Any] | None, message: str) -> bool:
    """The form seems to ask for a password, a token or a key (its message, or a field's name
    or title: a description that warns against giving one is no such request)."""
    texts = [message]
    for name, spec in ((schema or {}).get("properties") or {}).items():
        texts += [name, str(spec.get("title", ""))]
    return any(SENSITIVE.search(text) for text in texts if text)


def check_ask(ask: InputAsk) -> None:
    """Raises `InvalidAsk` when what the server asks cannot be shown to a person."""
    _fields_of(ask)


def _fields_of(ask: InputAsk) -> dict[str, Any]:
    params = ask.params
    mode = params.get("mode") or InputRequest.FORM
    message = clean_text(params.get("message", ""), MESSAGE_CAP)
    if mode == InputRequest.URL:
        url = str(params.get("url") or "")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > URL_CAP:
            raise InvalidAsk("the URL to open must be an http or https URL")
        return {
            "mode": InputRequest.URL,
            "message": message,
            "url": url,
            "elicitation_id": str(params.get("elicitationId") or "")[:200],
            "requested_schema": None,
            "field_order": [],
            "sensitive": False,
        }
    if mode != InputRequest.FORM:
        raise InvalidAsk(f"unknown mode {mode!r}")
    schema = clean_schema(params.get("requestedSchema") or {"type": "object", "properties": {}})
    return {
        "mode": InputRequest.FORM,
        "message": message,
        "url": "",
        "elicitation_id": "",
        "requested_schema": schema,
        "field_order": list(schema["properties"]),
        "sensitive": looks_sensitive(schema, message),
    }


# --- checking an answer -------------------------------------------------------------------------


def _choices(spec: dict[str, Any]) -> list[str] | None:
    if "enum" in spec:
        return list(spec["enum"])
    if "oneOf" in spec:
        return [o["const"] for o in spec["oneOf"]]
    return None


def check_content(schema: dict[str, Any] | None, content: Any) -> list[dict[str, str]]:
    """Every way `content` breaks the requested `schema` (as `clean_schema` left it), each
    with the field it concerns."""
    if not isinstance(content, dict):
        return [{"path": "", "message": "the answer must be a JSON object"}]
    properties = (schema or {}).get("properties") or {}
    problems: list[dict[str, str]] = []
    for name in (schema or {}).get("required") or []:
        if content.get(name) in (None, "", []):
            problems.append({"path": name, "message": "is required"})
    for name, value in content.items():
        spec = properties.get(name)
        if spec is None:
            problems.append({"path": name, "message": "is not asked for"})
            continue
        if value is None:
            continue
        problem = _field_problem(spec, value)
        if problem:
            problems.append({"path": name, "message": problem})
    return problems


def _field_problem(spec: dict[str, Any], value: Any) -> str:
    kind = spec.get("type")
    if kind == "boolean":
        return "" if isinstance(value, bool) else "must be true or false"
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if kind == "integer" and not float(value).is_integer():
            return "must be a whole number"
        if "minimum" in spec and value < spec["minimum"]:
            return f"must be at least {spec['minimum']}"
        if "maximum" in spec and value > spec["maximum"]:
            return f"must be at most {spec['maximum']}"
        return ""
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of choices"
        allowed = spec["items"].get("enum") or [o["const"] for o in spec["items"].get("anyOf", [])]
        wrong = [v for v in value if v not in allowed]
        if wrong:
            return f"{wrong[0]!r} is not one of the choices"
        if "minItems" in spec and len(value) < spec["minItems"]:
            return f"choose at least {spec['minItems']}"
        if "maxItems" in spec and len(value) > spec["maxItems"]:
            return f"choose at most {spec['maxItems']}"
        return ""
    if not isinstance(value, str):
        return "must be text"
    choices = _choices(spec)
    if choices is not None and value not in choices:
        return f"{value!r} is not one of the choices"
    if "minLength" in spec and len(value) < spec["minLength"]:
        return f"must be at least {spec['minLength']} characters"
    if "maxLength" in spec and len(value) > spec["maxLength"]:
        return f"must be at most {spec['maxLength']} characters"
    fmt = spec.get("format")
    if value and fmt == "email" and not _EMAIL.fullmatch(value):
        return "must be an email address"
    if value and fmt == "uri":
        parts = urlsplit(value)
        if not parts.scheme or not (parts.netloc or parts.path):
            return "must be a URI"
    if value and fmt == "date" and _date(value) is None:
        return "must be a date (YYYY-MM-DD)"
    if value and fmt == "date-time" and _datetime(value) is None:
        return "must be a date and time (YYYY-MM-DDTHH:MM:SSZ)"
    return ""


def _date(value: str) -> date | None:
    try:
        return parse_date(value)
    except ValueError:  # well formed, but no such day
        return None


def _datetime(value: str) -> datetime | None:
    try:
        return parse_datetime(value)
    except ValueError:
        return None


# --- the writes ---------------------------------------------------------------------------------


def _announce(row: InputRequest) -> None:
    send_event_on_commit(EVENT, {"id": row.pk, "call_id": row.call_id, "status": row.status})


def open_request(call_id: int, ask: InputAsk, *, resumes: bool = False, agent_round: bool = False) -> InputRequest:
    """The server of a running call asks for input: the row, and the call waiting for input.
    Raises `InvalidAsk` when what it asks cannot be shown, `InputError` when the call is not
    running (it was finished meanwhile). `resumes`: nobody holds the call meanwhile; once
    answered it goes back to the outbox (`life.resume`). `agent_round`: the round is the
    agent's to answer, by calling again (`answer_round`)."""
    fields = _fields_of(ask)
    now = timezone.now()
    with transaction.atomic():
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status not in (Call.RUNNING, Call.INPUT):
            raise InputError(f"call #{call.pk} is {call.get_status_display()}, not running", status=409)
        row = InputRequest.objects.create(
            call=call,
            server_name=ask.server[:32],
            key=ask.key[:200],
            round=InputRequest.objects.filter(call=call).count() + 1,
            created_at=now,
            expires_at=now + timedelta(seconds=settings.PATCHBAY_INPUT_WAIT),
            resumes=resumes,
            agent_round=agent_round,
            **fields,
        )
        event = life.Event("input_requested", ask.server, {"input": row.pk, "mode": row.mode, "message": row.message})
        if call.status == Call.RUNNING:
            life.move(call, Call.INPUT, event)
        else:
            life.note(call, event.kind, event.actor, **event.detail)
        _announce(row)
        if not agent_round:  # a person answers: approvers are told, as of an approval
            notify.call_waiting(call)
    return row


def can_answer(user: Any, call: Call) -> bool:
    """Who may answer a call's requests for input, and see the answers: whoever asked for
    the call, and approvers."""
    if not getattr(user, "is_authenticated", False):
        return False
    return user.has_perm("calls.approve_call") or (
        call.requester_user_id is not None and call.requester_user_id == user.pk
    )


_ANSWER_EVENTS = {
    InputRequest.ACCEPTED: "input_answered",
    InputRequest.DECLINED: "input_declined",
    InputRequest.CANCELLED: "input_cancelled",
}


def answer(
    request_id: int,
    action: str,
    content: Any = None,
    *,
    person: Any = None,
    name: str = "",
    via: str = InputRequest.PERSON,
    check: bool = True,
) -> InputRequest:
    """Answer an open request: accept (with `content`, checked against what was asked),
    decline or cancel. Raises `InputError` (409 when it is no longer open). `check=False`:
    the agent's client answered, and its answer goes to the server as it is (the server
    checks it)."""
    if action not in InputRequest.ANSWERS:
        raise InputError("the answer is accept, decline or cancel")
    who = name or (person.get_username() if person is not None else "")
    with transaction.atomic():
        row = InputRequest.objects.select_for_update().get(pk=request_id)
        if not row.is_open:
            raise InputError(f"input request #{row.pk} is {row.get_status_display()}: it takes no answer", status=409)
        kept: dict[str, Any] | None = None
        if action == InputRequest.ACCEPTED and row.mode == InputRequest.FORM:
            given = storable(content if content is not None else {})
            if check:  # a person's answer: what they left out is the schema's default (SEP-1034)
                given = with_defaults(row.requested_schema, given) if isinstance(given, dict) else given
            problems = check_content(row.requested_schema, given) if check else []
            if problems:
                first = problems[0]
                raise InputError(f"{first['path'] or 'the answer'}: {first['message']}", errors=problems)
            kept = given
        _close(
            row,
            action,
            _ANSWER_EVENTS[action],
            who,
            content=kept,
            via=via,
            person=person if getattr(person, "pk", None) else None,
        )
    return row


def expire(request_id: int) -> InputRequest:
    """Nobody answered in time: the host answers "cancel" for them."""
    return _end_by_host(request_id, InputRequest.EXPIRED, "input_expired")


def _end_by_host(request_id: int, status: str, kind: str) -> InputRequest:
    """End an open request without an answer from anyone (`expire`, `withdraw`)."""
    with transaction.atomic():
        row = InputRequest.objects.select_for_update().get(pk=request_id)
        if row.is_open:
            _close(row, status, kind, "", via=InputRequest.HOST)
    return row


def expire_due() -> int:
    """Give up on every open request past its time (the outbox sweeper calls this): those
    nobody waits for in a process (a round the outbox holds, a waiter that died)."""
    expired = 0
    due = InputRequest.objects.filter(status=InputRequest.OPEN, expires_at__lte=timezone.now())
    for request_id in due.values_list("pk", flat=True):
        if expire(request_id).status == InputRequest.EXPIRED:
            expired += 1
    return expired


def withdraw(request_id: int) -> InputRequest:
    """The call ended, or stopped waiting, before anyone answered."""
    return _end_by_host(request_id, InputRequest.WITHDRAWN, "input_withdrawn")


def _close(
    row: InputRequest,
    status: str,
    kind: str,
    actor: str,
    *,
    content: dict[str, Any] | None = None,
    via: str,
    person: Any = None,
) -> None:
    """Give `row` its end (in the caller's transaction); the call runs again once none of
    its requests is open."""
    now = timezone.now()
    row.status, row.content, row.answered_via, row.answered_at = status, content, via, now
    row.answered_by, row.answered_by_name = person, actor
    row.save(update_fields=["status", "content", "answered_via", "answered_at", "answered_by", "answered_by_name"])
    call = Call.objects.select_for_update().get(pk=row.call_id)
    # The history says who answered and how, not what: the answer is shown only to those
    # who may see it (`can_answer`).
    event = life.Event(kind, actor, {"input": row.pk, "via": via})
    still_open = InputRequest.objects.filter(call_id=row.call_id, status=InputRequest.OPEN).exists()
    if call.status == Call.INPUT and not still_open and row.resumes:
        life.move(call, Call.QUEUED, event)
        life.resume(call)
    elif call.status == Call.INPUT and not still_open:
        life.move(call, Call.RUNNING, event)
        if row.agent_round and status == InputRequest.EXPIRED:
            # Nobody runs the call meanwhile: the agent never came back to go on with it.
            failure = McpFailure(
                "ambiguous",
                "the agent did not come back with the input its server asked for",
                transient=False,
                reason="input_not_given",
            )
            life.finish(call, None, failure, 0.0)
    else:
        life.note(call, event.kind, event.actor, **event.detail)
    _announce(row)
    transaction.on_commit(lambda: wake([row.pk]))


def result_of(row: InputRequest) -> dict[str, Any]:
    """What the server is told (`ElicitResult` as plain data)."""
    if row.status == InputRequest.ACCEPTED:
        if row.mode == InputRequest.FORM:
            return {"action": "accept", "content": with_defaults(row.requested_schema, row.content or {})}
        return {"action": "accept"}
    if row.status == InputRequest.DECLINED:
        return {"action": "decline"}
    return {"action": "cancel"}


# --- waiting for the answer -----------------------------------------------------------------------

_waiters: dict[int, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
_waiters_lock = threading.Lock()


def wake(ids: Iterable[int]) -> None:
    """Wake whoever in this process waits for these requests (any thread)."""
    with _waiters_lock:
        found = [w for i in ids for w in _waiters.get(i, ())]
    for loop, event in found:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # its loop is closed: nobody waits there any more
            continue


def heard(events: Iterable[dict[str, Any]]) -> None:
    """Live events from any process (the agents' endpoint listens): wake the waiters of the
    requests they name."""
    wake(
        int(e["data"]["id"])
        for e in events
        if e.get("kind") == EVENT and isinstance((e.get("data") or {}).get("id"), int)
    )


async def await_answer(request_id: int) -> InputRequest:
    """Wait until the request is no longer open; past its expiry, the host answers for it."""
    event = asyncio.Event()
    entry = (asyncio.get_running_loop(), event)
    with _waiters_lock:
        _waiters.setdefault(request_id, set()).add(entry)
    read = sync_to_async(lambda: InputRequest.objects.get(pk=request_id), thread_sensitive=False)
    try:
        while True:
            row = await read()
            if not row.is_open:
                return row
            left = (row.expires_at - timezone.now()).total_seconds()
            if left <= 0:
                return await sync_to_async(expire, thread_sensitive=False)(request_id)
            try:
                await asyncio.wait_for(event.wait(), timeout=min(RECHECK, left))
            except TimeoutError:
                pass
            event.clear()
    finally:
        with _waiters_lock:
            waiting = _waiters.get(request_id)
            if waiting is not None:
                waiting.discard(entry)
                if not waiting:
                    del _waiters[request_id]


async def _opened(call_of: Callable[[], Awaitable[int]], ask: InputAsk) -> InputRequest:
    """The row of a server's request for input during the call `call_of()` names; what
    cannot be shown to anyone is refused to the server (`InputRefused`)."""
    call_id = await call_of()
    try:
        return await sync_to_async(open_request, thread_sensitive=False)(call_id, ask)
    except InvalidAsk as exc:
        logger.info("call #%s: %s's request for input was refused: %s", call_id, ask.server, exc)
        raise InputRefused(f"the host refuses this request for input: {exc}") from None


def person_answers(
    call_of: Callable[[], Awaitable[int]],
    *,
    on_open: Callable[[InputRequest], Any] | None = None,
    waiting: Callable[[InputRequest], Coroutine[Any, Any, None]] | None = None,
) -> Callable[[InputAsk], Awaitable[dict[str, Any]]]:
    """A `CallWatch.on_elicit` that asks a person: `call_of()` gives the call's id (writing
    its row first, if it is not written yet). `on_open` hears of each request made (the
    outbox extends its lease); `waiting(row)`, if given, runs beside the wait until the
    answer (the agents' endpoint keeps its agent informed)."""

    async def on_elicit(ask: InputAsk) -> dict[str, Any]:
        row = await _opened(call_of, ask)
        if on_open is not None:
            await sync_to_async(on_open, thread_sensitive=False)(row)
        try:
            async with anyio.create_task_group() as group:
                if waiting is not None:
                    group.start_soon(waiting, row)
                row = await await_answer(row.pk)
                group.cancel_scope.cancel()
        except BaseException:
            # The call ended (or its caller went away) before an answer: nobody is asked any more.
            with anyio.CancelScope(shield=True):
                await sync_to_async(withdraw, thread_sensitive=False)(row.pk)
            raise
        return result_of(row)

    return on_elicit


def agent_answers(
    call_of: Callable[[], Awaitable[int]], ask_agent: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
) -> Callable[[InputAsk], Awaitable[dict[str, Any]]]:
    """A `CallWatch.on_elicit` that passes the request to the agent's own client
    (`ask_agent(params)` gives its `ElicitResult` as plain data): on record as a person's is,
    answered by the agent."""

    async def on_elicit(ask: InputAsk) -> dict[str, Any]:
        row = await _opened(call_of, ask)
        try:
            given = await ask_agent(ask.params)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await sync_to_async(withdraw, thread_sensitive=False)(row.pk)
            raise
        action = str(given.get("action")) if given.get("action") in InputRequest.ANSWERS else InputRequest.CANCELLED
        content = given.get("content") if action == InputRequest.ACCEPTED else None
        with anyio.CancelScope(shield=True):
            await sync_to_async(answer, thread_sensitive=False)(
                row.pk, action, content, via=InputRequest.AGENT, check=False
            )
        return given

    return on_elicit


def check_round(server: str, requests: dict[str, Any]) -> dict[str, InputAsk]:
    """The requests for input (`elicitation/create`) of a 2026-07-28 server's round, by key,
    each checked as one asked during a call (`check_ask`: `InvalidAsk` when it cannot be
    shown); sampling and roots requests are the agent's alone, not checked here."""
    asks = {
        key: InputAsk(server=server, params=request.get("params") or {}, era="modern", key=key)
        for key, request in requests.items()
        if isinstance(request, dict) and request.get("method") == "elicitation/create"
    }
    for ask in asks.values():
        check_ask(ask)
    return asks


def open_round(call_id: int, server: str, requests: dict[str, Any]) -> dict[str, int]:
    """A 2026-07-28 server's round of input requests, handed to the agent whose call it is
    (`agent_round`): a row for each request for input, by key (`check_round`). Raises
    `InvalidAsk` as `open_request` does."""
    asks = check_round(server, requests)
    with transaction.atomic():
        return {key: open_request(call_id, ask, agent_round=True).pk for key, ask in asks.items()}


def answer_round(call_id: int, rows: dict[str, int], responses: dict[str, Any]) -> None:
    """The agent came back with its answers to a round (`open_round`): each on record as
    the agent's (a request it did not answer is withdrawn); the call runs again."""
    with transaction.atomic():
        for key, pk in rows.items():
            given = responses.get(key)
            action = given.get("action") if isinstance(given, dict) else None
            row = InputRequest.objects.filter(pk=pk, call_id=call_id).first()
            if row is None or not row.is_open:
                continue
            if action in InputRequest.ANSWERS:
                content = given.get("content") if action == InputRequest.ACCEPTED else None  # type: ignore[union-attr]
                answer(pk, str(action), content, via=InputRequest.AGENT, check=False)
            else:
                withdraw(pk)


def open_requests(user: Any = None) -> list[InputRequest]:
    """The open requests, oldest first (those `user` may answer, if given)."""
    rows = list(InputRequest.objects.filter(status=InputRequest.OPEN).select_related("call").order_by("id"))
    if user is None:
        return rows
    return [row for row in rows if can_answer(user, row.call)]
