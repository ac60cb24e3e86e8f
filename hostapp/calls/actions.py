"""Calls: start one, run it, approve or deny it. Each function owns its transaction."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from hostapp.catalog.models import Tool
from hostapp.core.events import send_event_on_commit
from hostapp.mcp import McpFailure, result_failure

from .ledger import Event, Finished
from .models import Call, CallEvent, Rule
from .policy import Decision, decide

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


def _event(call: Call, kind: str, actor: str = "", **detail: Any) -> None:
    """An event that happens now."""
    _add_event(call, Event(kind, actor, detail, timezone.now()))


def _created_event(requester: Requester, decision: Decision, at: datetime) -> Event:
    return Event("created", requester.name, {"decision": decision.kind, "reason": decision.reason}, at)


def _outcome_event(call_fields: dict[str, Any]) -> Event:
    """How a delivered call ended, from its row's outcome fields."""
    kind = "failed" if call_fields["status"] == Call.FAILED else "succeeded"
    return Event(kind, "", {"error": call_fields["error"]}, call_fields["finished_at"])


def _add_event(call: Call, event: Event) -> None:
    CallEvent.objects.create(call=call, kind=event.kind, actor=event.actor, detail=event.detail, at=event.at)


def _record_new(tool: Tool, decision: Decision, requester: Requester, arguments: Any, now: datetime) -> Call:
    """A new call's row and its created event (in the caller's transaction)."""
    call = Call.objects.create(**_call_fields(tool, decision, requester, arguments, now))
    call.tool = tool  # the instance read by the caller, with its server
    _add_event(call, _created_event(requester, decision, now))
    return call


def _broadcast(call: Call) -> None:
    send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})


# What starting a call reads of its tool and server (the rest loads if something asks).
_CALL_TOOL_FIELDS = (
    "exposed_name",
    "original_name",
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


def _call_fields(tool: Tool, decision: Decision, requester: Requester, arguments: Any, now: datetime) -> dict[str, Any]:
    """A new call's row, as the policy's decision leaves it."""
    status = {Call.RUN: Call.RUNNING, Call.OUTBOX: Call.QUEUED, Call.ASK: Call.WAITING, Call.REFUSE: Call.BLOCKED}[
        decision.kind
    ]
    return {
        "created_at": now,
        "requester_kind": requester.kind,
        "requester_user_id": getattr(requester.user, "pk", None),
        "requester_name": requester.name,
        "requester_agent_id": getattr(requester.agent, "pk", None),
        "server_name": tool.server.name,
        "tool_name": tool.exposed_name,
        "original_name": tool.original_name,
        "tool_id": tool.pk,
        "tool_class": tool.effective_class,
        "definition_hash": tool.definition_hash,
        "arguments": arguments,
        "argument_digest": argument_digest(arguments),
        "decision": decision.kind,
        "decision_reason": decision.reason,
        "status": status,
        "approval_expires_at": now + timedelta(seconds=settings.PATCHBAY_APPROVAL_TTL)
        if decision.kind == Call.ASK
        else None,
        "started_at": now if decision.kind == Call.RUN else None,
        "error": {"kind": "policy", "message": decision.reason} if decision.kind == Call.REFUSE else None,
        "is_error": decision.kind == Call.REFUSE,
        "finished_at": now if decision.kind == Call.REFUSE else None,
    }


def _outcome_fields(result: dict[str, Any] | None, failure: McpFailure | None, seconds: float) -> dict[str, Any]:
    """What a delivered call's row says of how it went (`attempts` aside)."""
    return {
        "result": result,
        "is_error": failure is not None,
        "error": failure.as_dict() if failure is not None else None,
        "status": Call.FAILED if failure is not None else Call.SUCCEEDED,
        "finished_at": timezone.now(),
        "duration_ms": round(seconds * 1000, 2),
    }


def start_call(tool_name: str, arguments: Any, requester: Requester, *, run: bool = True) -> Call:
    """Record a call and act on the policy: run it, queue it, hold it for approval, or refuse it.

    With `run=False` a call the policy runs at once is left `running` for the caller to
    deliver (the agents' endpoint awaits it on its event loop with :func:`arun_now`).
    """
    from hostapp.outbox import actions as outbox

    try:
        # `get` asks for no ordering (`first` would sort by the primary key).
        tool = Tool.objects.select_related("server").only(*_CALL_TOOL_FIELDS).get(exposed_name=tool_name)
    except Tool.DoesNotExist:
        tool = None
    if tool is None or (requester.agent is not None and not requester.agent.may_use(tool.server.name)):
        raise CallError(f"no tool named {tool_name!r}", status=404)
    errors = validate_arguments(tool.input_schema, arguments)
    if errors:
        first = errors[0]
        where = f" at {first['path']}" if first["path"] else ""
        raise CallError(f"invalid arguments{where}: {first['message']}", errors=errors)
    decision = decide(tool)
    with transaction.atomic():
        call = _record_new(tool, decision, requester, arguments, timezone.now())
        if decision.kind == Call.OUTBOX:
            outbox.enqueue(call)
        _broadcast(call)
    if decision.kind == Call.RUN and run:
        run_now(call, tool)
    return call


def run_now(call: Call, tool: Tool) -> Call:
    """Deliver a call from this process, at once (read-only tools)."""
    from hostapp.catalog.pool import pool_for

    pool = pool_for(tool.server)
    started = time.perf_counter()
    try:
        result = pool.call_tool(tool.server.name, call.original_name, call.arguments)
    except McpFailure as failure:
        return record_outcome(call, None, failure, time.perf_counter() - started)
    return record_outcome(call, result, result_failure(result, call.original_name), time.perf_counter() - started)


async def arun_now(call: Call) -> Call:
    """:func:`run_now` for async callers: the upstream call is awaited, no thread waits on it."""
    from asgiref.sync import sync_to_async

    from hostapp.catalog.pool import current_pool, pool_for

    tool = call.tool
    assert tool is not None
    pool = current_pool(tool.server) or await sync_to_async(pool_for, thread_sensitive=False)(tool.server)
    started = time.perf_counter()
    result: dict[str, Any] | None = None
    try:
        result = await pool.acall_tool(tool.server.name, call.original_name, call.arguments)
        failure = result_failure(result, call.original_name)
    except McpFailure as exc:
        failure = exc
    return await sync_to_async(record_outcome, thread_sensitive=False)(
        call, result, failure, time.perf_counter() - started
    )


def record_outcome(call: Call, result: dict[str, Any] | None, failure: McpFailure | None, seconds: float) -> Call:
    with transaction.atomic():
        call.attempts += 1
        outcome = _outcome_fields(result, failure, seconds)
        for name, value in outcome.items():
            setattr(call, name, value)
        call.save(update_fields=["attempts", *outcome])
        _add_event(call, _outcome_event(outcome))
        _broadcast(call)
    return call


def record_running(tool: Tool, decision: Decision, requester: Requester, arguments: Any, started_at: datetime) -> Call:
    """A call the policy ran at once (`decision` is a RUN decision read at most moments ago),
    recorded as running; :func:`record_outcome` finishes it."""
    with transaction.atomic():
        call = _record_new(tool, decision, requester, arguments, started_at)
        _broadcast(call)
    return call


def finished_call(
    tool: Tool,
    decision: Decision,
    requester: Requester,
    arguments: Any,
    started_at: datetime,
    result: dict[str, Any] | None,
    failure: McpFailure | None,
    seconds: float,
) -> Finished:
    """A call the policy ran at once, finished: the row and events `start_call` and
    `record_outcome` would have written, for the ledger writer (hostapp/calls/ledger.py)."""
    outcome = _outcome_fields(result, failure, seconds)
    fields = {**_call_fields(tool, decision, requester, arguments, started_at), "attempts": 1, **outcome}
    return Finished(fields, [_created_event(requester, decision, started_at), _outcome_event(outcome)])


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


def approve(call_id: int, approver: Any, *, always_allow: bool = False, approver_name: str = "") -> Call:
    """Approve a waiting call: single use, bound to its arguments and the tool's definition.

    A call that can no longer be approved (expired, its tool changed or blocked since) is
    finished as such, and the refusal is raised after that is committed.
    """
    from hostapp.outbox import actions as outbox

    name = approver_name or approver.get_username()
    refusal = ""
    with transaction.atomic():
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status != Call.WAITING:
            raise ApprovalError(f"call #{call.pk} is {call.get_status_display()}, not waiting for approval")
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
            # Single use: only one decision moves the call out of `waiting`.
            taken = Call.objects.filter(pk=call.pk, status=Call.WAITING).update(
                status=Call.QUEUED,
                decided_by=approver if getattr(approver, "pk", None) else None,
                decided_by_name=name,
                decided_at=now,
            )
            if taken != 1:
                raise ApprovalError(f"call #{call.pk} was decided by someone else")
            call.refresh_from_db()
            _event(call, "approved", name, always_allow=always_allow)
            if always_allow:
                assert tool is not None
                _allow_always(call, tool, approver, name)
            outbox.enqueue(call)
            _broadcast(call)
    if refusal:
        raise ApprovalError(refusal)
    return call


def _allow_always(call: Call, tool: Tool, approver: Any, name: str) -> None:
    """Record "always allow this tool" as a rule; an admin's block is never overturned."""
    existing = Rule.objects.filter(server_name=tool.server.name, tool_name=tool.exposed_name).first()
    if existing is not None and existing.action == Rule.BLOCK:
        _event(call, "rule_kept", name, rule=str(existing), reason="a block rule is not replaced by an approval")
        return
    rule, _ = Rule.objects.update_or_create(
        server_name=tool.server.name,
        tool_name=tool.exposed_name,
        defaults={
            "action": Rule.ALLOW,
            "reason": f"always allowed by {name}",
            "created_by": approver if getattr(approver, "pk", None) else None,
            "source": f"approval of call #{call.pk}",
        },
    )
    _event(call, "rule_created", name, rule=str(rule))


def deny(call_id: int, approver: Any, reason: str, *, approver_name: str = "") -> Call:
    name = approver_name or approver.get_username()
    reason = reason.strip()
    if not reason:
        raise ApprovalError("a denial needs a reason: the caller receives it")
    with transaction.atomic():
        call = Call.objects.select_for_update().get(pk=call_id)
        if call.status != Call.WAITING:
            raise ApprovalError(f"call #{call.pk} is {call.get_status_display()}, not waiting for approval")
        call.decided_by = approver if getattr(approver, "pk", None) else None
        _finish_unapproved(call, Call.DENIED, reason, name)
    return call


def _finish_unapproved(call: Call, status: str, reason: str, actor: str) -> None:
    now = timezone.now()
    call.status = status
    call.denial_reason = reason
    call.decided_by_name = actor
    call.decided_at = now
    call.finished_at = now
    call.is_error = True
    label = {Call.DENIED: "Denied", Call.EXPIRED: "Expired", Call.BLOCKED: "Blocked"}[status]
    call.error = {"kind": status, "message": f"{label}: {reason}"}
    call.save(
        update_fields=[
            "status",
            "denial_reason",
            "decided_by",
            "decided_by_name",
            "decided_at",
            "finished_at",
            "is_error",
            "error",
        ]
    )
    _event(call, status, actor, reason=reason)
    _broadcast(call)


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
