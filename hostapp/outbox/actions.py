"""The outbox: deliver side-effecting calls once in effect, retry, and dead-letter.

The database is the truth; Redis only carries wake-ups. An action is written in the same
transaction as its call and a delivery task is queued on commit. A worker claims the
action atomically with a lease, delivers it with its idempotency key, and records the
outcome, all conditional on still holding the lease. The sweeper (beat) re-queues due
actions whose wake-up was lost and reclaims the leases of workers that died.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from hostapp.calls.models import Call, CallEvent
from hostapp.catalog.actions import applied_annotations
from hostapp.catalog.models import Tool
from hostapp.core.events import send_event_on_commit
from hostapp.mcp import McpFailure, result_failure
from hostapp.mcp.errors import transport_error

from .models import Action, Attempt

logger = logging.getLogger(__name__)

# The project's own reverse-DNS key for idempotency keys in a request's `_meta`.
IDEMPOTENCY_META_KEY = "dev.patchbay/idempotencyKey"
IDEMPOTENCY_EXTENSION = "dev.patchbay/idempotency"
IDEMPOTENCY_ARGUMENTS = ("idempotency_key", "idempotencyKey")
# A wake-up older than this without a claim is presumed lost, and sent again.
REQUEUE_AFTER = timedelta(seconds=30)


def _queue_delivery(action_id: int) -> None:
    from .tasks import deliver

    try:
        deliver.delay(action_id)
    except Exception as exc:  # boundary: a lost wake-up only delays the action; the sweeper re-queues it
        logger.warning("action #%s: delivery not queued (%s); the sweeper will pick it up", action_id, exc)


def enqueue(call: Call) -> Action:
    """Create the action for `call` inside the caller's transaction; wake a worker on commit."""
    tool = Tool.objects.filter(exposed_name=call.tool_name).only("outbox_max_attempts").first()
    max_attempts = (tool.outbox_max_attempts if tool else None) or settings.PATCHBAY_OUTBOX_MAX_ATTEMPTS
    action = Action.objects.create(call=call, max_attempts=max_attempts, next_attempt_at=timezone.now())
    CallEvent.objects.create(call=call, kind="queued", detail={"action": action.pk, "key": action.idempotency_key})
    transaction.on_commit(lambda: _queue_delivery(action.pk))
    send_event_on_commit("outbox.changed", {"id": action.pk, "status": action.status})
    return action


def backoff(attempts: int) -> float:
    """Capped exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(n-1))]."""
    ceiling = min(
        settings.PATCHBAY_OUTBOX_BACKOFF_CAP, settings.PATCHBAY_OUTBOX_BACKOFF_BASE * 2 ** max(0, attempts - 1)
    )
    return random.uniform(0, ceiling)


def retry_is_safe(tool: Tool | None) -> bool:
    """May a request that might have reached the server be sent again?

    Yes when the tool is idempotent by the host's lights (a trusted server's hint, or an
    admin's word), or when the server says it honours our idempotency keys.
    """
    if tool is None:
        return False
    if applied_annotations(tool).get("idempotentHint"):
        return True
    caps = tool.server.capabilities or {}
    return IDEMPOTENCY_EXTENSION in (caps.get("extensions") or {}) or IDEMPOTENCY_EXTENSION in (
        caps.get("experimental") or {}
    )


def _call_status(action_status: str) -> str:
    return {
        Action.PENDING: Call.QUEUED,
        Action.LEASED: Call.RUNNING,
        Action.DONE: Call.SUCCEEDED,
        Action.DEAD: Call.FAILED,
        Action.UNKNOWN: Call.UNKNOWN,
        Action.DISCARDED: Call.FAILED,
    }[action_status]


# --- claiming ---------------------------------------------------------------------------------


def claim(action_id: int, worker: str) -> Action | None:
    """Take the lease on a due action, or None if it is not due or someone else has it."""
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.PATCHBAY_OUTBOX_LEASE)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Lock the row only if nobody else holds it; a busy row is someone else's claim.
            row = (
                Action.objects.select_for_update(skip_locked=True)
                .filter(pk=action_id, status=Action.PENDING, next_attempt_at__lte=now)
                .first()
            )
            if row is None:
                return None
        # A conditional update: exactly one claimant sees a row count of 1.
        taken = Action.objects.filter(pk=action_id, status=Action.PENDING, next_attempt_at__lte=now).update(
            status=Action.LEASED, lease_until=lease_until, leased_by=worker, attempts=F("attempts") + 1
        )
        if taken != 1:
            return None
        action = Action.objects.select_related("call").get(pk=action_id)
        Attempt.objects.create(action=action, number=action.attempts, worker=worker, started_at=now, outcome="started")
        call = action.call
        call.status = Call.RUNNING
        call.attempts = action.attempts
        if call.started_at is None:
            call.started_at = now
        call.save(update_fields=["status", "attempts", "started_at"])
        send_event_on_commit("outbox.changed", {"id": action.pk, "status": action.status})
        send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
    return action


# --- delivering --------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # done, retry, dead, unknown
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def _arguments(call: Call, tool: Tool | None, key: str) -> tuple[dict[str, Any], str]:
    """The arguments to send and the key to send with them.

    A tool that declares an idempotency argument gets the key there too. When the caller
    already passed one, that key is the call's key (in `_meta` as well): two different
    keys for one request would contradict each other.
    """
    args = dict(call.arguments)
    props = ((tool.input_schema if tool else {}) or {}).get("properties") or {}
    declared = [name for name in IDEMPOTENCY_ARGUMENTS if name in props]
    given = next((args[name] for name in declared if isinstance(args.get(name), str) and args[name]), None)
    key = given or key
    for name in declared:
        args.setdefault(name, key)
    return args, key


def deliver(action_id: int, worker: str = "") -> str:
    """One delivery attempt; returns what became of the action."""
    from hostapp.catalog.pool import pool_for

    worker = worker or f"pid-{__import__('os').getpid()}"
    action = claim(action_id, worker)
    if action is None:
        return "not-claimed"
    call = action.call
    tool = Tool.objects.select_related("server").filter(exposed_name=call.tool_name).first()
    started = time.perf_counter()
    outcome: Outcome
    if tool is None or tool.status != Tool.ACTIVE or tool.definition_hash != call.definition_hash:
        why = (
            "is gone from the catalog"
            if tool is None
            else ("is quarantined" if tool.status != Tool.ACTIVE else "changed its definition since the call was made")
        )
        failure = McpFailure("protocol", f"not delivered: the tool {why}", transient=False, reason="tool_changed")
        outcome = Outcome("dead", error=failure.as_dict())
    elif not tool.server.enabled:
        failure = transport_error(f"{tool.server.name} is disabled", reason="disabled")
        outcome = _classify(action, tool, failure)
    else:
        pool = pool_for(tool.server)
        arguments, key = _arguments(call, tool, action.idempotency_key)
        try:
            result = pool.call_tool(
                tool.server.name,
                call.original_name,
                arguments,
                timeout=settings.PATCHBAY_OUTBOX_CALL_TIMEOUT,
                meta={IDEMPOTENCY_META_KEY: key},
            )
        except McpFailure as failure:
            outcome = _classify(action, tool, failure)
        else:
            failure = result_failure(result, call.original_name)
            if failure is None:
                outcome = Outcome("done", result=result)
            else:
                # A tool error is the tool's answer: sending it again gets the same one.
                outcome = Outcome("dead", result=result, error=failure.as_dict())
    return record(action, worker, outcome, time.perf_counter() - started)


def _classify(action: Action, tool: Tool | None, failure: McpFailure) -> Outcome:
    error = failure.as_dict()
    if not failure.transient:
        return Outcome("dead", error=error)
    if failure.ambiguous and not retry_is_safe(tool):
        return Outcome("unknown", error=error)
    if action.attempts >= action.max_attempts:
        return Outcome(
            "dead", error={**error, "message": f"{error['message']} (gave up after {action.attempts} attempts)"}
        )
    return Outcome("retry", error=error)


def record(action: Action, worker: str, outcome: Outcome, seconds: float) -> str:
    """Store an attempt's outcome, if this worker still holds the lease."""
    now = timezone.now()
    with transaction.atomic():
        current = Action.objects.select_for_update().select_related("call").get(pk=action.pk)
        if current.status != Action.LEASED or current.leased_by != worker or current.attempts != action.attempts:
            # The lease ran out and the sweeper took the action back: its verdict stands.
            logger.warning("action #%s: lease lost before the outcome was recorded", action.pk)
            return "lease-lost"
        status = {"done": Action.DONE, "retry": Action.PENDING, "dead": Action.DEAD, "unknown": Action.UNKNOWN}[
            outcome.status
        ]
        current.status = status
        current.lease_until = None
        current.last_error = outcome.error
        fields = ["status", "lease_until", "last_error"]
        if status == Action.PENDING:
            current.next_attempt_at = now + timedelta(seconds=backoff(current.attempts))
            current.queued_at = now
            fields += ["next_attempt_at", "queued_at"]
        if status == Action.DONE:
            current.done_at = now
            fields.append("done_at")
        current.save(update_fields=fields)
        Attempt.objects.filter(action=current, number=current.attempts).update(
            finished_at=now, outcome=outcome.status, error=outcome.error
        )
        call = current.call
        call.status = _call_status(status)
        call.attempts = current.attempts
        if outcome.result is not None:
            call.result = outcome.result
        call.error = outcome.error
        call.is_error = outcome.status != "done"
        call.duration_ms = round(seconds * 1000, 2)
        if status in (Action.DONE, Action.DEAD, Action.UNKNOWN):
            call.finished_at = now
        call.save(update_fields=["status", "attempts", "result", "error", "is_error", "duration_ms", "finished_at"])
        CallEvent.objects.create(
            call=call,
            kind={
                "done": "succeeded",
                "retry": "retry_scheduled",
                "dead": "dead_lettered",
                "unknown": "outcome_unknown",
            }[outcome.status],
            actor=worker,
            detail={
                "attempt": current.attempts,
                "error": outcome.error,
                "next_attempt_at": current.next_attempt_at.isoformat() if status == Action.PENDING else None,
            },
        )
        send_event_on_commit("outbox.changed", {"id": current.pk, "status": current.status})
        send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
        if status == Action.PENDING:
            delay = max(0.0, (current.next_attempt_at - now).total_seconds())
            transaction.on_commit(lambda: _queue_retry(current.pk, delay))
        if status == Action.DEAD:
            transaction.on_commit(lambda: _alert(current.pk))
    return outcome.status


def _queue_retry(action_id: int, delay: float) -> None:
    from .tasks import deliver

    try:
        deliver.apply_async((action_id,), countdown=delay)
    except Exception as exc:  # boundary: the sweeper re-queues due actions
        logger.warning("action #%s: retry not queued (%s); the sweeper will pick it up", action_id, exc)


def _alert(action_id: int) -> None:
    from .tasks import send_dead_letter_alert

    Action.objects.filter(pk=action_id).update(alerted=True)
    send_event_on_commit("outbox.dead_letter", {"id": action_id})
    if settings.PATCHBAY_ALERT_WEBHOOK:
        try:
            send_dead_letter_alert.delay(action_id)
        except Exception as exc:  # boundary: the alert is best effort; the dead letter is on the page
            logger.warning("dead-letter alert for action #%s not queued: %s", action_id, exc)


# --- the sweeper ---------------------------------------------------------------------------------


def reclaim_expired_leases() -> int:
    """A worker died mid-delivery: the request may have reached the server (ambiguous)."""
    now = timezone.now()
    reclaimed = 0
    for action_id in Action.objects.filter(status=Action.LEASED, lease_until__lt=now).values_list("pk", flat=True):
        with transaction.atomic():
            action = (
                Action.objects.select_for_update()
                .select_related("call")
                .filter(pk=action_id, status=Action.LEASED, lease_until__lt=now)
                .first()
            )
            if action is None:
                continue
            tool = Tool.objects.select_related("server").filter(exposed_name=action.call.tool_name).first()
            error = {
                "kind": "ambiguous",
                "reason": "lease_expired",
                "transient": True,
                "message": f"the worker {action.leased_by or '?'} stopped before recording an outcome",
            }
            if retry_is_safe(tool) and action.attempts < action.max_attempts:
                action.status = Action.PENDING
                action.next_attempt_at = now
                outcome = "lease_expired"
            elif retry_is_safe(tool):
                action.status = Action.DEAD
                outcome = "dead"
            else:
                action.status = Action.UNKNOWN
                outcome = "unknown"
            action.last_error = error
            action.lease_until = None
            action.save(update_fields=["status", "next_attempt_at", "last_error", "lease_until"])
            Attempt.objects.filter(action=action, number=action.attempts).update(
                finished_at=now, outcome=outcome, error=error
            )
            call = action.call
            call.status = _call_status(action.status)
            call.error = error
            call.attempts = action.attempts
            if action.status in (Action.DEAD, Action.UNKNOWN):
                call.is_error = True
                call.finished_at = now
            call.save(update_fields=["status", "error", "attempts", "is_error", "finished_at"])
            if action.status == Action.PENDING:
                transaction.on_commit(lambda a=action.pk: _queue_delivery(a))
            CallEvent.objects.create(
                call=call, kind="lease_expired", detail={"attempt": action.attempts, "then": action.status}
            )
            send_event_on_commit("outbox.changed", {"id": action.pk, "status": action.status})
            send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
            if action.status == Action.DEAD:
                transaction.on_commit(lambda a=action.pk: _alert(a))
            reclaimed += 1
    return reclaimed


def requeue_due(limit: int = 1000) -> int:
    """Wake workers for due actions whose wake-up may have been lost (a Redis restart)."""
    now = timezone.now()
    due = list(
        Action.objects.filter(status=Action.PENDING, next_attempt_at__lte=now, queued_at__lte=now - REQUEUE_AFTER)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    if due:
        Action.objects.filter(pk__in=due).update(queued_at=now)
        for action_id in due:
            _queue_delivery(action_id)
    return len(due)


def sweep() -> dict[str, int]:
    from hostapp.calls.actions import expire_waiting

    return {"reclaimed": reclaim_expired_leases(), "requeued": requeue_due(), "expired": expire_waiting()}


# --- people's decisions ----------------------------------------------------------------------------


class OutboxError(Exception):
    pass


def redrive(action_id: int, actor: str) -> Action:
    """Send a dead or unknown action again, with the same idempotency key."""
    with transaction.atomic():
        action = Action.objects.select_for_update().select_related("call").get(pk=action_id)
        if action.status not in (Action.DEAD, Action.UNKNOWN):
            raise OutboxError(
                f"action #{action.pk} is {action.get_status_display()}; only dead or unknown ones are redriven"
            )
        now = timezone.now()
        action.status = Action.PENDING
        action.next_attempt_at = now
        action.queued_at = now
        # A fresh budget of attempts, with the same key.
        tool = Tool.objects.filter(exposed_name=action.call.tool_name).only("outbox_max_attempts").first()
        action.max_attempts = action.attempts + (
            (tool.outbox_max_attempts if tool else None) or settings.PATCHBAY_OUTBOX_MAX_ATTEMPTS
        )
        action.resolved_by = actor
        action.resolution = "redriven"
        action.save(
            update_fields=["status", "next_attempt_at", "queued_at", "max_attempts", "resolved_by", "resolution"]
        )
        call = action.call
        call.status = Call.QUEUED
        call.finished_at = None
        call.is_error = False
        call.error = None
        call.save(update_fields=["status", "finished_at", "is_error", "error"])
        CallEvent.objects.create(call=call, kind="redriven", actor=actor, detail={"key": action.idempotency_key})
        transaction.on_commit(lambda: _queue_delivery(action.pk))
        send_event_on_commit("outbox.changed", {"id": action.pk, "status": action.status})
        send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
    return action


def discard(action_id: int, actor: str, reason: str) -> Action:
    reason = reason.strip()
    if not reason:
        raise OutboxError("discarding needs a reason")
    return _resolve(action_id, actor, Action.DISCARDED, f"discarded: {reason}", Call.FAILED)


def mark_done(action_id: int, actor: str, note: str = "") -> Action:
    """A person checked that an action whose outcome was unknown did take effect."""
    return _resolve(
        action_id,
        actor,
        Action.DONE,
        f"marked done{': ' + note if note else ''}",
        Call.SUCCEEDED,
        only=(Action.UNKNOWN,),
    )


def _resolve(
    action_id: int,
    actor: str,
    status: str,
    resolution: str,
    call_status: str,
    only: tuple[str, ...] = (Action.DEAD, Action.UNKNOWN, Action.PENDING),
) -> Action:
    with transaction.atomic():
        action = Action.objects.select_for_update().select_related("call").get(pk=action_id)
        if action.status not in only:
            raise OutboxError(
                f"action #{action.pk} is {action.get_status_display()}; it cannot be {resolution.split(':')[0]}"
            )
        now = timezone.now()
        action.status = status
        action.resolved_by = actor
        action.resolution = resolution
        action.done_at = now
        action.save(update_fields=["status", "resolved_by", "resolution", "done_at"])
        call = action.call
        call.status = call_status
        call.finished_at = now
        if status == Action.DISCARDED:
            call.is_error = True
            call.error = {"kind": "discarded", "message": resolution}
        else:
            # Someone checked: it did take effect. What was unknown is no longer an error.
            call.is_error = False
            call.error = None
        call.save(update_fields=["status", "finished_at", "is_error", "error"])
        CallEvent.objects.create(call=call, kind=status, actor=actor, detail={"resolution": resolution})
        send_event_on_commit("outbox.changed", {"id": action.pk, "status": action.status})
        send_event_on_commit("call.changed", {"id": call.pk, "status": call.status, "tool": call.tool_name})
    return action
