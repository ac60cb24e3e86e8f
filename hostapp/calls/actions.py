"""Calls: start one, run it, approve or deny it. What each writes, `life` writes."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import jsonschema
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from hostapp.catalog.models import Tool
from hostapp.catalog.pool import apool_for, pool_for
from hostapp.core.events import send_event
from hostapp.core.jsonvalues import storable
from hostapp.mcp import LOG_LEVELS, CallWatch, McpFailure, errors, result_failure
from hostapp.mcp.sanitize import clean_text

from . import inputs, life, notify
from .models import Call, Rule
from .policy import Decision, decide
from .suggest import ALLOW, BLOCK, suggest

logger = logging.getLogger(__name__)


class CallError(Exception):
    """The call cannot be made; `status` is the HTTP status a view would answer with."""

    def __init__(self, message: str, status: int = 400, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors or []


class ApprovalError(Exception):
    pass


@dataclass(frozen=True)
class Requester:
    kind: str  # Call.USER, Call.CLI or Call.AGENT
    name: str
    user: Any = None
    agent: Any = None

    @classmethod
    def for_user(cls, user: Any) -> Requester:
        return cls(Call.USER, user.get_username(), user)


def argument_digest(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@functools.lru_cache(maxsize=2048)
def _validator(schema_json: str) -> Any:
    """A checked, compiled validator per distinct schema (schemas change rarely; calls often)."""
    schema = json.loads(schema_json)
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator_cls.check_schema(schema)
    return validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)


def validate_arguments(schema: dict[str, Any], arguments: Any) -> list[dict[str, str]]:
    """Every way `arguments` breaks `schema`, each with the path of the field it concerns."""
    return check_arguments(schema_key(schema), arguments)


def schema_key(schema: dict[str, Any]) -> str:
    """A tool's input schema as :func:`check_arguments` takes it (kept by callers that check often)."""
    return json.dumps(schema or {"type": "object"}, sort_keys=True)


def check_arguments(schema_json: str, arguments: Any) -> list[dict[str, str]]:
    """:func:`validate_arguments` for a schema given by :func:`schema_key`."""
    if not isinstance(arguments, dict):
        return [{"path": "", "message": "arguments must be a JSON object"}]
    try:
        validator = _validator(schema_json)
    except jsonschema.SchemaError as exc:
        return [{"path": "", "message": f"the tool's input schema is invalid: {exc.message}"}]
    try:
        found = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except jsonschema.exceptions.UnknownType as exc:
        return [{"path": "", "message": f"the tool's input schema is invalid: unknown type {exc.type!r}"}]
    return [{"path": "/".join(str(p) for p in e.absolute_path), "message": e.message} for e in found]


# What starting a call reads of its tool and server (the rest loads if something asks).
_CALL_TOOL_FIELDS = (
    "exposed_name",
    "original_name",
    "agent_name",
    "status",
    "quarantine_reason",
    "effective_class",
    "definition",
    "definition_hash",
    "outbox_max_attempts",
    "server__name",
    "server__enabled",
    "server__config_changed_at",
)


def new_call(tool: Tool, decision: Decision, requester: Requester, arguments: Any, now: datetime) -> dict[str, Any]:
    """The row of a new call of `tool` as `decision` leaves it (`arguments` as stored: `storable`)."""
    return life.new_fields(tool, decision, requester, arguments, argument_digest(arguments), now)


# What a caller of `start_call` catches when the requester sent its submit key before.
Submitted = life.Submitted


def start_call(tool_name: str, arguments: Any, requester: Requester, *, run: bool = True, submit_key: str = "") -> Call:
    """Record a call and act on the policy: run it, queue it, hold it for approval, or refuse it.

    With `run=False` a call the policy runs at once is left `running` for the caller to
    deliver (the agents' endpoint awaits it on its event loop with :func:`arun_now`). With a
    `submit_key` the requester sent before, nothing is done again: `Submitted` carries the
    first call.
    """
    try:
        # `get` asks for no ordering (`first` would sort by the primary key).
        tool = Tool.objects.select_related("server").only(*_CALL_TOOL_FIELDS).get(exposed_name=tool_name)
    except Tool.DoesNotExist:
        tool = None
    if tool is None:
        raise CallError(f"no tool named {tool_name!r}", status=404)
    agent = requester.agent
    if agent is not None and not agent.sees_tool(tool):
        # Outside the agent's view: to it the tool does not exist, and the refusal is on record.
        refused = Decision(Call.REFUSE, f"outside the view of the agent {requester.name}")
        life.open_call(new_call(tool, refused, requester, storable(arguments), timezone.now()), tool=tool)
        raise CallError(f"no tool named {tool_name!r}", status=404)
    # Checked, kept and sent as the ledger can keep them (a NaN is null, a NUL goes).
    arguments = storable(arguments)
    errors = validate_arguments(tool.input_schema, arguments)
    if errors:
        first = errors[0]
        where = f" at {first['path']}" if first["path"] else ""
        raise CallError(f"invalid arguments{where}: {first['message']}", errors=errors)
    decision = decide(tool)
    fields = new_call(tool, decision, requester, arguments, timezone.now())
    if decision.kind == Call.ASK:
        # What an approver is shown beside the call, made before anyone decides.
        fields["suggestion"] = suggest(Call(**fields)).as_json()
    call = life.open_call({**fields, "submit_key": submit_key[:64]} if submit_key else fields, tool=tool)
    if decision.kind == Call.RUN and run:
        call = run_now(call, tool)
    elif call.status == Call.WAITING:
        decided, tried = _act_on_suggestion(call)
        if decided is not None:
            return decided
        if tried:
            call.refresh_from_db()  # acting failed: it may have been finished meanwhile (void, blocked)
        if call.status == Call.WAITING:
            notify.call_waiting(call)
    return call


# Who decided a call the host decided on its suggestion (an admin's opt-in).
SUGGESTION_ACTOR = "suggestion"


def _act_on_suggestion(call: Call) -> tuple[Call | None, bool]:
    """Allow or deny `call` at once where its suggestion may be acted on: (the call decided,
    or None for a person to decide; whether acting on it was tried)."""
    made = call.suggestion or {}
    if not made.get("acts") or made.get("verdict") not in (ALLOW, BLOCK):
        return None, False
    basis = ", ".join(f"#{b['call_id']}" for b in made.get("basis", []))
    how = f"a {made['probability']:.0%} chance a person approves it, from {made.get('decisions', 0)} past answers"
    try:
        if made["verdict"] == ALLOW:
            return approve(call.pk, None, approver_name=SUGGESTION_ACTOR, by_suggestion=made), True
        reason = (
            f"denied on the host's suggestion ({how}; it rests on {basis or 'no single call'}). A person may still "
            f"approve it: ask one to reopen call #{call.pk} on Patchbay, then ask for its status."
        )
        return deny(call.pk, None, reason, approver_name=SUGGESTION_ACTOR, by_suggestion=made), True
    except ApprovalError as exc:  # it could not be decided so (its tool changed): as it stands now
        logger.info("call #%s: the suggestion could not be acted on (%s)", call.pk, exc)
    except Exception:  # boundary: fail closed, the call waits for a person as any other
        logger.exception("call #%s: acting on its suggestion failed; a person decides", call.pk)
    return None, True


def run_now(call: Call, tool: Tool) -> Call:
    """Deliver a call from this process, at once (read-only tools). Returns once it has
    finished, or as soon as its server asks a person for input: the call then goes on in
    this process's pool, waits for the answer there (`inputs`) and is finished there."""
    pool = pool_for(tool.server)
    call.tool = tool
    settled = threading.Event()
    # A person answers its server's requests for input (`arun_now` shows the rest on its page).
    watch = CallWatch(on_elicit=inputs.person_answers(_known(call.pk), on_open=lambda row: settled.set()))
    running = pool.spawn(arun_now(call, watch))
    running.add_done_callback(lambda _: settled.set())
    settled.wait()
    if running.done():
        return running.result()
    return Call.objects.get(pk=call.pk)  # `call` is the running call's own from now on


def _known(call_id: int) -> Any:
    """`inputs.person_answers`'s `call_of` for a call already written."""

    async def call_of() -> int:
        return call_id

    return call_of


def person_watch(call_id: int, **hooks: Any) -> CallWatch:
    """What a call nobody else listens to hears: its server's requests for input go to a
    person (`inputs.person_answers`, with its `on_open` and `waiting` hooks); its progress
    and log messages to its page (`shown`)."""
    return shown(call_id, CallWatch(on_elicit=inputs.person_answers(_known(call_id), **hooks)))


# The call's page is told of its server's log messages at this level and above, the first
# PAGE_LOG_LINES of them (a chatty server must not flood every open page).
PAGE_LOG_LEVEL = "info"
PAGE_LOG_LINES = 200


def shown(call_id: int, watch: CallWatch | None = None) -> CallWatch:
    """`watch`, and the call's page: its server's progress and log messages reach the page
    live (`call.progress`, `call.log`, not stored), whoever else hears them."""
    base = watch or CallWatch()
    lines = 0

    def on_progress(progress: float, total: float | None, message: str | None) -> Any:
        text = clean_text(message, 300) if message else ""
        send_event("call.progress", {"id": call_id, "progress": progress, "total": total, "message": text})
        return base.on_progress(progress, total, message) if base.on_progress is not None else None

    def on_log(entry: dict[str, Any]) -> Any:
        nonlocal lines
        level = entry.get("level", "")
        if lines < PAGE_LOG_LINES and LOG_LEVELS.index(level) >= LOG_LEVELS.index(PAGE_LOG_LEVEL):
            lines += 1
            data = entry.get("data")
            words = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
            line = {
                "level": level,
                "logger": clean_text(entry.get("logger") or "", 100),
                "data": clean_text(words, 1000),
            }
            send_event("call.log", {"call_id": call_id, **line})
        return base.on_log(entry) if base.on_log is not None and base.hears(level) else None

    asked = [PAGE_LOG_LEVEL] + ([base.log_level] if base.log_level in LOG_LEVELS else [])
    return CallWatch(
        on_progress=on_progress,
        on_log=on_log,
        log_level=min(asked, key=LOG_LEVELS.index),
        on_sample=base.on_sample,
        on_elicit=base.on_elicit,
    )


async def arun_now(call: Call, watch: CallWatch | None = None) -> Call:
    """:func:`run_now` for async callers: the upstream call is awaited, no thread waits on it;
    `watch` hears the server's progress and log messages meanwhile (and its requests for
    input: a person answers them when `watch` is None). Cancelled (the agent went away), the
    request is cancelled at the server and the call is on record as ended so."""
    tool = call.tool
    assert tool is not None
    pool = await apool_for(tool.server)
    watch = person_watch(call.pk) if watch is None else shown(call.pk, watch)
    started = time.perf_counter()
    finish = sync_to_async(life.finish, thread_sensitive=False)
    result: dict[str, Any] | None = None
    failure: McpFailure | None
    try:
        result = await pool.acall_tool(tool.server.name, call.original_name, call.arguments, watch=watch)
        failure = result_failure(result, call.original_name)
    except McpFailure as exc:
        failure = exc
    except asyncio.CancelledError:
        gone = errors.ambiguous_error("the caller went away before the call finished", reason="cancelled")
        await asyncio.shield(finish(call, None, gone, time.perf_counter() - started))
        raise
    return await finish(call, result, failure, time.perf_counter() - started)


def record_ran(
    tool: Tool,
    decision: Decision,
    requester: Requester,
    arguments: Any,
    started_at: datetime,
    result: dict[str, Any] | None,
    failure: McpFailure | None,
    seconds: float,
) -> Call:
    """A call the policy ran at once (`decision`, read moments ago), written when it has
    finished: the row and events `start_call` and `run_now` would have written, in one
    transaction (the agents' endpoint, hostapp/gateway/server.py)."""
    return life.open_finished(
        new_call(tool, decision, requester, arguments, started_at), life.outcome_fields(result, failure, seconds, 1)
    )


def record_running(tool: Tool, decision: Decision, requester: Requester, arguments: Any, started_at: datetime) -> Call:
    """A call the policy ran at once, still running (`life.finish` ends it), written a while
    after it began."""
    return life.open_call(new_call(tool, decision, requester, arguments, started_at), late=True)


def _void_reason(call: Call, tool: Tool | None) -> str:
    if tool is None:
        return "the tool is gone from the catalog"
    if tool.status != Tool.ACTIVE:
        return "the tool is quarantined since the call was made"
    if tool.definition_hash != call.definition_hash:
        return "the tool's definition changed since the call was made"
    if argument_digest(call.arguments) != call.argument_digest:
        return "the call's arguments do not match what was asked"
    return ""


def approve(
    call_id: int,
    approver: Any,
    *,
    always_allow: bool = False,
    approver_name: str = "",
    by_suggestion: dict[str, Any] | None = None,
) -> Call:
    """Approve a waiting call: single use, bound to its arguments and the tool's definition.
    `by_suggestion`: the host approves it on its suggestion (no person: not learned from).

    A call that can no longer be approved (expired, its tool changed or blocked since) is
    finished as such, and the refusal is raised after that is committed.
    """
    name = approver_name or approver.get_username()
    refusal = ""
    with transaction.atomic():
        # Locked: a second approver waits for this decision, then finds it made.
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status != Call.WAITING:
            raise ApprovalError(f"call #{call.pk} is {call.get_status_display()}, not waiting for approval")
        if settings.PATCHBAY_FOUR_EYES and is_own(call, approver):
            raise ApprovalError(f"call #{call.pk} is your own: someone else must approve it (PATCHBAY_FOUR_EYES is on)")
        now = timezone.now()
        tool = Tool.objects.select_related("server").filter(exposed_name=call.tool_name).first()
        void = _void_reason(call, tool)
        decision = decide(tool) if tool is not None and not void else None
        if call.approval_expires_at and now >= call.approval_expires_at:
            _finish_unapproved(call, Call.EXPIRED, "the approval request expired before anyone decided", name)
            refusal = f"call #{call.pk} expired before it was approved"
        elif void:
            _finish_unapproved(call, Call.DENIED, f"approval void: {void}; make the call again", name)
            refusal = f"call #{call.pk} cannot be approved: {void}"
        elif decision is not None and decision.kind == Call.REFUSE:
            _finish_unapproved(call, Call.BLOCKED, decision.reason, name)
            refusal = f"call #{call.pk} cannot be approved: {decision.reason}"
        else:
            call.tool = tool
            try:
                life.move(
                    call,
                    Call.QUEUED,
                    life.Event("approved", name, {"always_allow": always_allow, **_basis(by_suggestion)}),
                    decided_by=_person(approver),
                    decided_by_name=name,
                    decided_at=now,
                    approval="" if by_suggestion else Call.APPROVED,
                    decided_by_suggestion=bool(by_suggestion),
                )
            except life.MovedMeanwhile:
                raise ApprovalError(f"call #{call.pk} was decided by someone else") from None
            if always_allow:
                assert tool is not None
                _allow_always(call, tool, approver, name)
            life.deliver(call, tool)
    if refusal:
        raise ApprovalError(refusal)
    return call


def is_own(call: Call, person: Any) -> bool:
    """The person asked for this call themselves (a user; the CLI's stand-in is nobody)."""
    pk = getattr(person, "pk", None)
    return pk is not None and call.requester_user_id == pk


def _person(user: Any) -> Any:
    """The user to link a decision to (a CLI's stand-in has no row)."""
    return user if getattr(user, "pk", None) else None


def _allow_always(call: Call, tool: Tool, approver: Any, name: str) -> None:
    """Record "always allow this tool" as a rule; an admin's block is never overturned."""
    existing = Rule.objects.filter(server_name=tool.server.name, tool_name=tool.exposed_name).first()
    if existing is not None and existing.action == Rule.BLOCK:
        life.note(call, "rule_kept", name, rule=str(existing), reason="a block rule is not replaced by an approval")
        return
    rule, _ = Rule.objects.update_or_create(
        server_name=tool.server.name,
        tool_name=tool.exposed_name,
        defaults={
            "action": Rule.ALLOW,
            "reason": f"always allowed by {name}",
            "created_by": _person(approver),
            "source": f"approval of call #{call.pk}",
        },
    )
    life.note(call, "rule_created", name, rule=str(rule))


def _basis(made: dict[str, Any] | None) -> dict[str, Any]:
    """What a decision on a suggestion rests on, for the call's history."""
    if not made:
        return {}
    return {"probability": made.get("probability"), "basis": [b["call_id"] for b in made.get("basis", [])]}


def deny(
    call_id: int, approver: Any, reason: str, *, approver_name: str = "", by_suggestion: dict[str, Any] | None = None
) -> Call:
    name = approver_name or approver.get_username()
    reason = reason.strip()
    if not reason:
        raise ApprovalError("a denial needs a reason: the caller receives it")
    with transaction.atomic():
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status != Call.WAITING:
            raise ApprovalError(f"call #{call.pk} is {call.get_status_display()}, not waiting for approval")
        if by_suggestion:
            _finish_unapproved(call, Call.DENIED, reason, name, by_suggestion=by_suggestion)
        else:
            _finish_unapproved(
                call, Call.DENIED, reason, name, decided_by=_person(approver), approval=Call.REFUSED_BY_PERSON
            )
    return call


_LABELS = {Call.DENIED: "Denied", Call.EXPIRED: "Expired", Call.BLOCKED: "Blocked"}


def _finish_unapproved(
    call: Call,
    status: str,
    reason: str,
    actor: str,
    decided_by: Any = None,
    approval: str = "",
    by_suggestion: dict[str, Any] | None = None,
) -> None:
    """`approval`: a person's answer (a denial), what suggestions learn from; none for an
    expiry, a void approval, a block, or a denial on a suggestion."""
    now = timezone.now()
    life.move(
        call,
        status,
        life.Event(status, actor, {"reason": reason, **_basis(by_suggestion)}),
        approval=approval,
        decided_by_suggestion=bool(by_suggestion),
        denial_reason=reason,
        decided_by=decided_by,
        decided_by_name=actor,
        decided_at=now,
        finished_at=now,
        is_error=True,
        error={"kind": status, "message": f"{_LABELS[status]}: {reason}"},
    )


def reopen(call_id: int, person: Any) -> Call:
    """A person reverses a denial the host made on its suggestion: the call waits for a
    person again, with a fresh expiry (and approvers are told)."""
    name = person.get_username()
    with transaction.atomic():
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status != Call.DENIED or not call.decided_by_suggestion:
            raise ApprovalError(f"call #{call.pk} was not denied on a suggestion: it cannot be reopened")
        life.move(
            call,
            Call.WAITING,
            life.Event("reopened", name, {}),
            decided_by_suggestion=False,
            decided_by=None,
            decided_by_name="",
            decided_at=None,
            denial_reason="",
            finished_at=None,
            is_error=False,
            error=None,
            approval_expires_at=timezone.now() + timedelta(seconds=settings.PATCHBAY_APPROVAL_TTL),
        )
        notify.call_waiting(call)
    return call


def expire_waiting() -> int:
    """Expire every approval request past its time (the outbox sweeper calls this)."""
    now = timezone.now()
    expired = 0
    for call_id in Call.objects.filter(status=Call.WAITING, approval_expires_at__lte=now).values_list("pk", flat=True):
        with transaction.atomic():
            call = Call.objects.select_for_update().get(pk=call_id)
            if call.status == Call.WAITING:
                _finish_unapproved(call, Call.EXPIRED, "nobody approved it in time", "")
                expired += 1
    return expired
