"""A call's life: every write of a `Call` and its `CallEvent`s, in one place.

A call is made in one of the states a policy decision leaves it in, and then moves only
along the arrows of `MOVES`; a move that is not there raises `IllegalMove`. Every move is
one conditional UPDATE (the row must still be in the state it was read in, else
`MovedMeanwhile`), an event in the call's history if it has one, and a live event to open
pages after the transaction commits. Each write joins the caller's transaction if there is
one (without a savepoint: a move that fails spoils the whole transaction, as it should). The callers (the calls' own actions, the outbox, the
agents' endpoint) decide what happens; this module is how it is written.

=============== ===========================================================================
from            to
=============== ===========================================================================
(new)           waiting (a person must approve), queued (the outbox delivers it), running
                (run at once), blocked (refused by the policy)
waiting         queued (approved), denied (or approved, but void since), expired,
                blocked (approved, but the policy refuses it now)
queued          running (a worker took it), failed (discarded), dead (a dead letter)
running         succeeded, failed, dead (its delivery is a dead letter), unknown (the
                outcome is not known), queued (a retry), input (its server asks for
                input: `hostapp.calls.inputs`)
input           running (answered, or no longer waited for), queued (answered: its
                delivery resumes in the outbox, with the answers)
denied          waiting (reopened: a person reverses a denial the host made on its
                suggestion; `hostapp.calls.actions.reopen` checks which)
dead            queued (redriven), failed (discarded)
failed          queued (redriven: a row from before dead letters had a state of their own)
unknown         queued (redriven), succeeded (a person checked it did), failed (discarded)
succeeded,
expired,
blocked         (none: final)
=============== ===========================================================================

Calls the outbox delivers are handed to it by the `delivery` signal, sent in the same
transaction as the move that queues them (hostapp/outbox/apps.py connects it).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.dispatch import Signal
from django.utils import timezone

from hostapp.core.bulk import update_each
from hostapp.core.events import send_event_on_commit
from hostapp.core.jsonvalues import storable

from .models import Call, CallEvent

logger = logging.getLogger(__name__)

NEW = None
MOVES: dict[str | None, frozenset[str]] = {
    NEW: frozenset({Call.WAITING, Call.QUEUED, Call.RUNNING, Call.BLOCKED}),
    Call.WAITING: frozenset({Call.QUEUED, Call.DENIED, Call.EXPIRED, Call.BLOCKED}),
    Call.QUEUED: frozenset({Call.RUNNING, Call.FAILED, Call.DEAD}),
    Call.RUNNING: frozenset({Call.SUCCEEDED, Call.FAILED, Call.DEAD, Call.UNKNOWN, Call.QUEUED, Call.INPUT}),
    Call.INPUT: frozenset({Call.RUNNING, Call.QUEUED}),
    Call.DEAD: frozenset({Call.QUEUED, Call.FAILED}),
    Call.FAILED: frozenset({Call.QUEUED, Call.FAILED}),
    Call.UNKNOWN: frozenset({Call.QUEUED, Call.SUCCEEDED, Call.FAILED}),
    Call.SUCCEEDED: frozenset(),
    Call.DENIED: frozenset({Call.WAITING}),
    Call.EXPIRED: frozenset(),
    Call.BLOCKED: frozenset(),
}

# Sent (with `call=`) inside the transaction that made a call `queued` for delivery: the
# outbox writes its action there.
delivery = Signal()
# Sent (with `call=`) inside the transaction that made a call waiting for input `queued`
# again (its round answered): the outbox makes its action due.
resumed = Signal()


class IllegalMove(Exception):
    """A move the table does not allow: a bug in the caller, never a person's mistake."""


class MovedMeanwhile(Exception):
    """The call was moved by someone else since it was read (a second approver, say)."""

    def __init__(self, call: Call) -> None:
        super().__init__(f"call #{call.pk} was moved by someone else meanwhile")
        self.call = call


class Submitted(Exception):
    """The requester sent this submit key before: that call stands, no second one is made."""

    def __init__(self, call: Call) -> None:
        super().__init__(f"call #{call.pk} was submitted with this key already")
        self.call = call


# What servers and agents send is kept as the JSON columns can keep it (a NaN, a NUL byte).
_JSON_FIELDS = ("arguments", "result", "error")


def _storable(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: storable(v) if k in _JSON_FIELDS and v is not None else v for k, v in fields.items()}


def check(frm: str | None, to: str) -> None:
    if to not in MOVES.get(frm, frozenset()):
        raise IllegalMove(f"a call cannot move from {frm or 'nothing'} to {to}")


@dataclass(frozen=True)
class Event:
    """One line of a call's history."""

    kind: str
    actor: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None  # now, if not given


@dataclass
class Move:
    """Move `call` to `to`, setting `fields` on its row, with `event` in its history."""

    call: Call
    to: str
    fields: dict[str, Any] = field(default_factory=dict)
    event: Event | None = None


def _events(pairs: Iterable[tuple[Call, Event]]) -> None:
    now = timezone.now()
    CallEvent.objects.bulk_create(
        CallEvent(call=call, kind=e.kind, actor=e.actor, detail=storable(e.detail), at=e.at or now) for call, e in pairs
    )


def _announce(calls: list[Call]) -> None:
    """Tell open pages, on commit: one call as ever; many in one event per status."""
    if len(calls) == 1:
        call = calls[0]
        send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
        return
    groups: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        groups[call.status].append(call)
    for status, group in groups.items():
        send_event_on_commit(
            "call.changed",
            {"ids": [c.pk for c in group], "status": status, "tools": sorted({c.tool_name for c in group})},
        )


# --- making a call ----------------------------------------------------------------------------

# The state a policy decision leaves a new call in.
STATUS_OF_DECISION = {
    Call.RUN: Call.RUNNING,
    Call.OUTBOX: Call.QUEUED,
    Call.ASK: Call.WAITING,
    Call.REFUSE: Call.BLOCKED,
}


def new_fields(tool: Any, decision: Any, requester: Any, arguments: Any, digest: str, now: datetime) -> dict[str, Any]:
    """A new call's row, as the policy's decision leaves it (`tool` with its server)."""
    kind = decision.kind
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
        "argument_digest": digest,
        "decision": kind,
        "decision_reason": decision.reason,
        "status": STATUS_OF_DECISION[kind],
        "approval_expires_at": now + timedelta(seconds=settings.PATCHBAY_APPROVAL_TTL) if kind == Call.ASK else None,
        "started_at": now if kind == Call.RUN else None,
        "error": {"kind": "policy", "message": decision.reason} if kind == Call.REFUSE else None,
        "is_error": kind == Call.REFUSE,
        "finished_at": now if kind == Call.REFUSE else None,
    }


def outcome_fields(result: dict[str, Any] | None, failure: Any, seconds: float, attempts: int) -> dict[str, Any]:
    """What a call run at once says of how it went (`failure`: an McpFailure or None)."""
    return {
        "status": Call.FAILED if failure is not None else Call.SUCCEEDED,
        "attempts": attempts,
        "result": result,
        "is_error": failure is not None,
        "error": failure.as_dict() if failure is not None else None,
        "finished_at": timezone.now(),
        "duration_ms": round(seconds * 1000, 2),
    }


def _outcome_event(fields: dict[str, Any]) -> Event:
    kind = "failed" if fields["status"] == Call.FAILED else "succeeded"
    return Event(kind, "", {"error": fields["error"]}, fields["finished_at"])


def open_call(fields: dict[str, Any], *, tool: Any = None, late: bool = False) -> Call:
    """Write a new call (its row from `new_fields`) and its `created` event; a call made
    `queued` goes to the outbox in the same transaction. `tool`: the row the call was
    decided on, kept on the call (the outbox reads it). `late`: written a while after the
    call began (see `_still_there`). A call with a `submit_key` is written once per
    requester and key: a repeat raises `Submitted` with the first call."""
    check(NEW, fields["status"])
    if fields.get("submit_key"):
        return _open_once(fields, tool, late)
    return _write_new(fields, tool, late)


def _write_new(fields: dict[str, Any], tool: Any, late: bool) -> Call:
    with transaction.atomic(savepoint=False):
        call = Call.objects.create(**_storable(_still_there(fields) if late else fields))
        if tool is not None and call.tool_id == tool.pk:
            call.tool = tool
        _events([(call, _created(call))])
        if call.status == Call.QUEUED:
            deliver(call, tool if tool is not None and call.tool_id == tool.pk else None)
        _announce([call])
    return call


def _open_once(fields: dict[str, Any], tool: Any, late: bool) -> Call:
    """`open_call` for a call with a submit key: raises `Submitted` with the first call when
    the requester sent this key before, at once or while the first was being written (the
    unique constraint decides between two at the same moment)."""
    same = Call.objects.filter(
        requester_kind=fields["requester_kind"],
        requester_name=fields["requester_name"],
        submit_key=fields["submit_key"],
    )
    first = same.first()
    if first is None:
        try:
            with transaction.atomic():  # a savepoint: a caller's transaction survives the refusal
                return _write_new(fields, tool, late)
        except IntegrityError:
            first = same.first()
            if first is None:
                raise
    raise Submitted(first)


def _still_there(fields: dict[str, Any]) -> dict[str, Any]:
    """A call written after it began (when its server has answered) keeps no link to a tool
    or an agent's token deleted in the meantime, as deleting it afterwards would leave it."""
    gone: dict[str, None] = {}
    for link in (Call.tool.field, Call.requester_agent.field):
        pk = fields.get(link.attname)
        if pk is not None and not QuerySet(model=link.related_model).filter(pk=pk).exists():
            gone[link.attname] = None
    return {**fields, **gone}


def _created(call: Call) -> Event:
    return Event(
        "created", call.requester_name, {"decision": call.decision, "reason": call.decision_reason}, call.created_at
    )


def open_finished(fields: dict[str, Any], outcome: dict[str, Any]) -> Call:
    """Write a call the policy ran at once that has already finished (its row from
    `new_fields`, then `outcome_fields`), with both its events, in one transaction; late, as
    `open_call` says."""
    check(NEW, fields["status"])
    check(fields["status"], outcome["status"])
    with transaction.atomic(savepoint=False):
        call = Call.objects.create(**_storable(_still_there({**fields, **outcome})))
        _events([(call, _created(call)), (call, _outcome_event(outcome))])
        _announce([call])
    return call


# --- moving it ------------------------------------------------------------------------------------


def apply(moves: list[Move]) -> None:
    """Make `moves` (each call at most once), in the caller's transaction or one of their own:
    one UPDATE, conditional on every call still being where it was read; their events; the
    live events on commit. Raises `IllegalMove` before writing anything, `MovedMeanwhile`
    if a call was moved by someone else (nothing of the moves is then written)."""
    if not moves:
        return
    for move in moves:
        check(move.call.status, move.to)
    with transaction.atomic(savepoint=False):
        rows = {m.call.pk: {**_storable(m.fields), "status": m.to} for m in moves}
        where = reduce(or_, (Q(pk=m.call.pk, status=m.call.status) for m in moves))
        if update_each(Call.objects.filter(where), "pk", rows) != len(moves):
            moved = next(
                (m.call for m in moves if not Call.objects.filter(pk=m.call.pk, status=m.call.status).exists()),
                moves[0].call,
            )
            raise MovedMeanwhile(moved)
        for m in moves:
            for name, value in rows[m.call.pk].items():
                setattr(m.call, name, value)
        _events((m.call, m.event) for m in moves if m.event is not None)
        _announce([m.call for m in moves])


def move(call: Call, to: str, event: Event | None = None, **fields: Any) -> Call:
    """One move (see `apply`)."""
    apply([Move(call, to, fields, event)])
    return call


def finish(call: Call, result: dict[str, Any] | None, failure: Any, seconds: float) -> Call:
    """A call run at once (`running`) has its answer: succeeded, or failed with `failure`."""
    outcome = outcome_fields(result, failure, seconds, call.attempts + 1)
    status = outcome.pop("status")
    return move(call, status, _outcome_event({**outcome, "status": status}), **outcome)


def note(call: Call, kind: str, actor: str = "", **detail: Any) -> None:
    """A line in the call's history that moves nothing (a rule made from its approval, the
    outbox's action for it)."""
    _events([(call, Event(kind, actor, detail))])


def deliver(call: Call, tool: Any = None) -> None:
    """Hand a call moved to `queued` (approved) to the outbox, in the caller's transaction.
    `tool`: the call's tool row, when the caller has just read it (the outbox then reads it
    no more)."""
    if call.status != Call.QUEUED:
        raise IllegalMove(f"call #{call.pk} is {call.status}: only a queued call is delivered")
    delivery.send(sender=Call, call=call, tool=tool)


def resume(call: Call) -> None:
    """Hand a call that waited for input back to the outbox (moved to `queued`, in the
    caller's transaction): its action is due again."""
    if call.status != Call.QUEUED:
        raise IllegalMove(f"call #{call.pk} is {call.status}: only a queued call is resumed")
    resumed.send(sender=Call, call=call)


# --- forgetting -----------------------------------------------------------------------------------


def prune(cutoff: datetime, keep: Q) -> int:
    """Delete finished calls made before `cutoff`, but those that `keep` matches, with their
    events, in batches: a long ledger must not hold one huge transaction."""
    old = Call.objects.filter(created_at__lt=cutoff, status__in=Call.FINAL).exclude(keep)
    deleted = 0
    while True:
        ids = list(old.values_list("pk", flat=True)[:1000])
        if not ids:
            return deleted
        Call.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
