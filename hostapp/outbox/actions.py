"""The outbox: deliver side-effecting calls once in effect, retry, and dead-letter.

The database is the truth; Redis only carries wake-ups. An action is written in the same
transaction as its call and a worker is woken on commit. A woken worker drains: it claims
the due actions in batches, each batch atomically with a lease, delivers them concurrently
with their idempotency keys, and records the outcomes of a batch in one transaction, each
conditional on still holding its lease. The sweeper (beat) re-queues due actions whose
wake-up was lost and reclaims the leases of workers that died.

Wake-ups are coalesced: while one is queued and no worker has started on it, committing
another action sends none (the worker that takes it claims every due action, oldest
first). A worker that claims a full batch wakes another one, so a backlog spreads over
every worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from hostapp.calls import inputs, life
from hostapp.calls.actions import expire_waiting, person_watch
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.actions import applied_annotations
from hostapp.catalog.models import Server, Tool
from hostapp.catalog.pool import pool_for
from hostapp.core.bulk import update_each
from hostapp.core.events import send_event_on_commit
from hostapp.core.redis_client import redis_client
from hostapp.mcp import InputAsk, McpFailure, Rounds, ServerConfig, input_required, result_failure
from hostapp.mcp.errors import transport_error

from .models import Action, Attempt

logger = logging.getLogger(__name__)

# The outbox's Celery tasks (hostapp/outbox/tasks.py), queued by their names: the tasks
# call these actions, and these queue the tasks without importing them.
DELIVER_TASK = "hostapp.outbox.deliver"
ALERT_TASK = "hostapp.outbox.dead_letter_alert"

# The project's own reverse-DNS key for idempotency keys in a request's `_meta`.
IDEMPOTENCY_META_KEY = "dev.patchbay/idempotencyKey"
IDEMPOTENCY_EXTENSION = "dev.patchbay/idempotency"
IDEMPOTENCY_ARGUMENTS = ("idempotency_key", "idempotencyKey")
# A wake-up older than this without a claim is presumed lost, and sent again.
REQUEUE_AFTER = timedelta(seconds=30)
# A woken worker keeps claiming full batches for this long, then hands over to another.
DRAIN_SECONDS = 10.0
# Set (in the broker's Redis) while a wake-up is queued that no worker has started on yet.
WAKE_KEY = "patchbay:outbox:wake"
# A wake-up lost with its flag set (a worker killed with it reserved) holds back the next
# ones for this long at most; the sweeper finds the actions it was for.
WAKE_TTL_MS = 5000
# After Redis failed to answer about the flag, wake without it for this long.
_FLAG_QUIET_AFTER_FAILURE = 10.0
# How many rounds of input a person may be asked for during one delivery, at most (the
# SDK's own bound of a 2026-07-28 call's rounds).
INPUT_ROUNDS = 10
# The handshake allowance of the pool's servers (the host never changes it).
_CONNECT_TIMEOUT = ServerConfig.connect_timeout  # the field's default (a dataclass's class attribute)


def batch_size() -> int:
    """Actions one claim takes at most. They are delivered concurrently, so a batch takes
    about as long as its slowest call."""
    return settings.PATCHBAY_OUTBOX_BATCH


# --- wake-ups ------------------------------------------------------------------------------------

_flag_down_until = 0.0


def _flag(op: str) -> bool:
    """Set the wake flag if unset ("set": True if this call set it) or clear it ("clear").

    When Redis does not answer, the answer is "set": a wake-up too many is harmless, one too
    few would leave the action to the sweeper.
    """
    global _flag_down_until
    if time.monotonic() < _flag_down_until:
        return True
    try:
        if op == "set":
            return bool(redis_client().set(WAKE_KEY, "1", nx=True, px=WAKE_TTL_MS))
        redis_client().delete(WAKE_KEY)
    except Exception as exc:  # boundary: the flag only saves wake-ups; without it, wake anyway
        _flag_down_until = time.monotonic() + _FLAG_QUIET_AFTER_FAILURE
        logger.warning("outbox wake-ups are not coalesced for %.0fs (%s)", _FLAG_QUIET_AFTER_FAILURE, exc)
    return True


def _queue_delivery(action_id: int) -> None:
    """Wake a worker for a due action, unless a wake-up is queued that no worker started on.

    A worker clears the flag before its first claim, so an action committed before the flag
    was found set is due when that claim looks: it is claimed then, or by a batch after it.
    """
    if not _flag("set"):
        return
    try:
        current_app.send_task(DELIVER_TASK, (action_id,))
    except Exception as exc:  # boundary: a lost wake-up only delays the action; the sweeper re-queues it
        _flag("clear")  # the next commit tries again
        logger.warning("action #%s: delivery not queued (%s); the sweeper will pick it up", action_id, exc)


def enqueue(call: Call, tool: Tool | None = None) -> Action:
    """Create the action for `call` inside the caller's transaction; wake a worker on commit.
    `tool`: the call's tool row if the caller has it (else it is read here)."""
    if tool is None:
        tool = Tool.objects.filter(exposed_name=call.tool_name).only("outbox_max_attempts").first()
    max_attempts = (tool.outbox_max_attempts if tool else None) or settings.PATCHBAY_OUTBOX_MAX_ATTEMPTS
    action = Action.objects.create(call=call, max_attempts=max_attempts, next_attempt_at=timezone.now())
    life.note(call, "queued", action=action.pk, key=action.idempotency_key)
    transaction.on_commit(lambda: _queue_delivery(action.pk))
    _announce([action])
    return action


def on_delivery(sender: Any, call: Call, tool: Tool | None = None, **kwargs: Any) -> None:
    """`life.delivery`'s receiver (hostapp/outbox/apps.py connects it)."""
    enqueue(call, tool)


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


# What each state of an action makes its call.
CALL_STATUS = {
    Action.PENDING: Call.QUEUED,
    Action.LEASED: Call.RUNNING,
    Action.DONE: Call.SUCCEEDED,
    Action.DEAD: Call.DEAD,
    Action.UNKNOWN: Call.UNKNOWN,
    Action.DISCARDED: Call.FAILED,
    Action.INPUT: Call.INPUT,
}


def _returning_ids(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _announce(actions: list[Action]) -> None:
    """Tell open pages, on commit: one action as ever; a batch in one event per status.
    (Their calls' moves are announced by `life`.)"""
    if len(actions) == 1:
        send_event_on_commit("outbox.changed", {"id": actions[0].pk, "status": actions[0].status})
        return
    groups: dict[str, list[int]] = defaultdict(list)
    for action in actions:
        groups[action.status].append(action.pk)
    for status, ids in groups.items():
        send_event_on_commit("outbox.changed", {"ids": ids, "status": status})


# --- claiming ---------------------------------------------------------------------------------


def _lease(
    worker: str, now: datetime, until: datetime, limit: int, ids: list[int] | None
) -> list[tuple[int, int, int]]:
    """Lease up to `limit` due actions (of `ids`, if given): [(id, call id, attempts)].

    One statement. On PostgreSQL the rows are picked with FOR UPDATE SKIP LOCKED: a row that
    another claimant has locked is its claim, skipped rather than waited for. SQLite has one
    writer at a time: the statement is atomic, and the update conditional on the row still
    being pending.
    """
    table = connection.ops.quote_name(Action._meta.db_table)
    stamp = connection.ops.adapt_datetimefield_value
    only = f" AND id IN ({', '.join(['%s'] * len(ids))})" if ids else ""
    pick = (
        f"SELECT id FROM {table} WHERE status = %s AND next_attempt_at <= %s{only}"
        " ORDER BY next_attempt_at, id LIMIT %s"
    )
    pick_params = [Action.PENDING, stamp(now), *(ids or []), limit]
    lease_params = [Action.LEASED, stamp(until), worker]
    if connection.vendor == "postgresql":
        sql = (
            f"WITH picked AS MATERIALIZED ({pick} FOR UPDATE SKIP LOCKED) "
            f"UPDATE {table} AS a SET status = %s, lease_until = %s, leased_by = %s, attempts = a.attempts + 1 "
            "FROM picked WHERE a.id = picked.id RETURNING a.id, a.call_id, a.attempts"
        )
        params = pick_params + lease_params
    else:
        sql = (
            f"UPDATE {table} SET status = %s, lease_until = %s, leased_by = %s, attempts = attempts + 1 "
            f"WHERE id IN ({pick}) AND status = %s RETURNING id, call_id, attempts"
        )
        params = lease_params + pick_params + [Action.PENDING]
    return [(int(i), int(c), int(n)) for i, c, n in _returning_ids(sql, params)]


def claim_batch(worker: str, limit: int | None = None, ids: list[int] | None = None) -> list[Action]:
    """Take the lease on up to `limit` due actions (only of `ids`, if given), oldest first.

    In one transaction: the lease, an attempt per action, the calls marked running. Returns
    the actions with their calls loaded; none if nothing is due or someone else has it all.
    """
    limit = limit or batch_size()
    now = timezone.now()
    until = now + timedelta(seconds=settings.PATCHBAY_OUTBOX_LEASE)
    with transaction.atomic():
        taken = _lease(worker, now, until, limit, ids)
        if not taken:
            return []
        Attempt.objects.bulk_create(
            [Attempt(action_id=i, number=n, worker=worker, started_at=now, outcome="started") for i, _, n in taken]
        )
        batch = sorted(
            Action.objects.select_related("call").filter(pk__in=[i for i, _, _ in taken]).order_by(),
            key=lambda a: (a.next_attempt_at, a.pk),
        )
        _announce(batch)
        life.apply(
            [
                life.Move(a.call, Call.RUNNING, {"attempts": a.attempts, "started_at": a.call.started_at or now})
                for a in batch
            ]
        )
    return batch


def claim(action_id: int, worker: str) -> Action | None:
    """Take the lease on a due action, or None if it is not due or someone else has it."""
    batch = claim_batch(worker, 1, ids=[action_id])
    return batch[0] if batch else None


# --- delivering --------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # done, retry, dead, unknown, input
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # input: the server's round of input requests ({key: {"method", "params"}}) and its state.
    requests: dict[str, Any] | None = None
    state: str | None = None


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


@dataclass
class _Send:
    """One request to make: the action's call, with its arguments and key."""

    index: int
    server: Server
    tool: str
    arguments: dict[str, Any]
    key: str
    action: int
    call: int
    rounds: Rounds


def _hold_lease(action_id: int, worker: str) -> Any:
    """While its server waits for a person's input, the worker keeps the action's lease (until
    the request for input expires, and a lease more): the sweeper must not take it back."""

    def hold(row: Any) -> None:
        until = row.expires_at + timedelta(seconds=settings.PATCHBAY_OUTBOX_LEASE)
        Action.objects.filter(pk=action_id, status=Action.LEASED, leased_by=worker).update(lease_until=until)

    return hold


def _send_all(sends: list[_Send], worker: str) -> dict[int, tuple[Any, float]]:
    """Make the requests concurrently through the pool: {index: (result or exception, seconds)}.
    A server's request for input during one goes to a person (`hostapp.calls.inputs`)."""
    timeout = settings.PATCHBAY_OUTBOX_CALL_TIMEOUT
    out: dict[int, tuple[Any, float]] = {}
    pool: Any = None
    unusable: dict[str, Exception] = {}  # servers whose configuration the pool refused
    for server in {send.server.name: send.server for send in sends}.values():
        try:
            pool = pool_for(server)
        except Exception as exc:  # noqa: BLE001 - handed back as the outcome of its requests
            unusable[server.name] = exc
    ready = []
    for send in sends:
        if send.server.name in unusable:
            out[send.index] = (unusable[send.server.name], 0.0)
        else:
            ready.append(send)
    if not ready:
        return out

    async def one(send: _Send) -> tuple[Any, float]:
        started = time.perf_counter()
        try:
            result = await pool.acall_tool(
                send.server.name,
                send.tool,
                send.arguments,
                timeout=timeout,
                meta={IDEMPOTENCY_META_KEY: send.key},
                watch=person_watch(send.call, on_open=_hold_lease(send.action, worker)),
                rounds=send.rounds,
            )
        except Exception as exc:  # noqa: BLE001 - handed back as this request's outcome
            return exc, time.perf_counter() - started
        return result, time.perf_counter() - started

    async def every() -> list[tuple[Any, float]]:
        return await asyncio.gather(*(one(send) for send in ready))

    started = time.perf_counter()
    try:
        # What Pool.call_tool allows (each request has its own deadlines inside the pool), and
        # the rounds of input a person may be asked for meanwhile.
        answers = pool.run(
            every(), timeout=timeout + _CONNECT_TIMEOUT + 5 + settings.PATCHBAY_INPUT_WAIT * INPUT_ROUNDS
        )
    except Exception as exc:  # noqa: BLE001 - the pool did not answer: each request's outcome
        answers = [(exc, time.perf_counter() - started)] * len(ready)
    for send, answer in zip(ready, answers, strict=True):
        out[send.index] = answer
    return out


def deliver_claimed(batch: list[Action], worker: str) -> list[str]:
    """Deliver claimed actions concurrently and record their outcomes in one transaction.

    Returns what became of each (done, retry, dead, unknown, lease-lost). A request that
    failed in an unexpected way (not an MCP failure) is not recorded: its action stays leased
    until the sweeper reclaims it, as a worker that died would leave it, and the error is
    raised once the others are recorded.
    """
    names = {action.call.tool_name for action in batch}
    tools = {t.exposed_name: t for t in Tool.objects.select_related("server").filter(exposed_name__in=names)}
    outcomes: dict[int, tuple[Outcome, float]] = {}
    sends: list[_Send] = []
    for index, action in enumerate(batch):
        call = action.call
        tool = tools.get(call.tool_name)
        if tool is None or tool.status != Tool.ACTIVE or tool.definition_hash != call.definition_hash:
            why = (
                "is gone from the catalog"
                if tool is None
                else (
                    "is quarantined" if tool.status != Tool.ACTIVE else "changed its definition since the call was made"
                )
            )
            failure = McpFailure("protocol", f"not delivered: the tool {why}", transient=False, reason="tool_changed")
            outcomes[index] = (Outcome("dead", error=failure.as_dict()), 0.0)
        elif not tool.server.enabled:
            failure = transport_error(f"{tool.server.name} is disabled", reason="disabled")
            outcomes[index] = (_classify(action, tool, failure), 0.0)
        else:
            arguments, key = _arguments(call, tool, action.idempotency_key)
            rounds = _answered_round(action)
            sends.append(_Send(index, tool.server, call.original_name, arguments, key, action.pk, call.pk, rounds))
    unexpected: list[Exception] = []
    answers = _send_all(sends, worker) if sends else {}
    for index, (answer, seconds) in answers.items():
        action = batch[index]
        tool = tools[action.call.tool_name]
        if isinstance(answer, McpFailure):
            outcomes[index] = (_classify(action, tool, answer), seconds)
        elif isinstance(answer, Exception):
            unexpected.append(answer)
        elif input_required(answer):
            outcomes[index] = (_round_outcome(tool, answer), seconds)
        else:
            tool_failure = result_failure(answer, action.call.original_name)
            # A tool error is the tool's answer: sending it again gets the same one.
            outcomes[index] = (
                Outcome("done", result=answer)
                if tool_failure is None
                else Outcome("dead", result=answer, error=tool_failure.as_dict()),
                seconds,
            )
    order = sorted(outcomes)
    recorded = record_batch(worker, [(batch[i], *outcomes[i]) for i in order]) if order else []
    if unexpected:
        if len(unexpected) > 1:
            logger.error("%d requests of a batch failed unexpectedly; the first follows", len(unexpected))
        raise unexpected[0]
    return recorded


def _answered_round(action: Action) -> Rounds:
    """What a delivery sends with its call: nothing more at first (a 2026-07-28 server's
    round of input comes back, `Rounds`); after a round, its answers and the server's state."""
    held = action.input_round or {}
    if not held:
        return Rounds()
    rows = {row.pk: row for row in InputRequest.objects.filter(pk__in=list(held.get("inputs", {}).values()))}
    responses = {key: inputs.result_of(rows[pk]) for key, pk in held.get("inputs", {}).items() if pk in rows}
    return Rounds(responses, held.get("state"))


def _round_outcome(tool: Tool, answer: dict[str, Any]) -> Outcome:
    """A round of input requests: the action waits for a person's answers (`input`), or is
    a dead letter when what the server asks cannot be given from the outbox."""
    requests = answer.get("inputRequests") or {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, dict) else None
        why = ""
        if method != "elicitation/create":
            why = f"the server asked for {method or 'something'} ({key}), which only an agent's client could give"
        else:
            try:
                inputs.check_ask(InputAsk(server=tool.server.name, params=request.get("params") or {}, era="modern"))
            except inputs.InvalidAsk as exc:
                why = f"the server asked for input the host cannot show ({key}): {exc}"
        if why:
            failure = McpFailure("protocol", f"not delivered: {why}", transient=False, reason="input_refused")
            return Outcome("dead", error=failure.as_dict())
    if not requests:
        failure = transport_error("the server asked for another round with no request in it", reason="input_empty")
        return Outcome("retry", error=failure.as_dict())
    return Outcome("input", requests=requests, state=answer.get("requestState"))


def on_resumed(sender: Any, call: Call, **kwargs: Any) -> None:
    """`life.resumed`'s receiver: the round an action waited for is answered, so it is due."""
    action = Action.objects.select_for_update().filter(call=call, status=Action.INPUT).first()
    if action is None:
        return
    now = timezone.now()
    action.status, action.next_attempt_at, action.queued_at = Action.PENDING, now, now
    action.save(update_fields=["status", "next_attempt_at", "queued_at"])
    transaction.on_commit(functools.partial(_queue_delivery, action.pk))
    _announce([action])


def deliver(action_id: int, worker: str = "") -> str:
    """One delivery attempt of this action; returns what became of it."""
    worker = worker or f"pid-{os.getpid()}"
    batch = claim_batch(worker, 1, ids=[action_id])
    if not batch:
        return "not-claimed"
    return deliver_claimed(batch, worker)[0]


def drain(worker: str, *, limit: int | None = None, seconds: float = DRAIN_SECONDS) -> dict[str, int]:
    """What a wake-up does: claim and deliver due actions, a batch at a time, until a claim
    finds less than a full batch (or `seconds` have passed). Returns how many became what."""
    limit = limit or batch_size()
    # Cleared before the first claim: an action committed from now on wakes a worker again.
    _flag("clear")
    counts: dict[str, int] = defaultdict(int)
    deadline = time.monotonic() + seconds
    while True:
        batch = claim_batch(worker, limit)
        full = len(batch) == limit
        if full:
            _queue_delivery(0)  # more may be due: another worker thread takes the next batch meanwhile
        if batch:
            try:
                for status in deliver_claimed(batch, worker):
                    counts[status] += 1
            except Exception:  # boundary: its actions wait for the sweeper; the next batch goes on
                logger.exception("outbox: a batch of %d actions was not fully delivered", len(batch))
                counts["error"] += 1
        if not full or time.monotonic() >= deadline:
            return dict(counts)


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


# --- recording ---------------------------------------------------------------------------------

_ACTION_STATUS = {
    "done": Action.DONE,
    "retry": Action.PENDING,
    "dead": Action.DEAD,
    "unknown": Action.UNKNOWN,
    "input": Action.INPUT,
}
_EVENT_KIND = {"done": "succeeded", "retry": "retry_scheduled", "dead": "dead_lettered", "unknown": "outcome_unknown"}


def _close_leases(worker: str, now: datetime, items: list[tuple[Action, Outcome, float]]) -> set[int]:
    """Give each action its outcome if this worker still holds its lease: the ids that it held.

    The lease is held while the action is leased by `worker` with the attempt number of the
    claim (another thread of the same worker may have claimed it again after the sweeper).
    The done ones in one conditional UPDATE; each of the others (their errors and retry
    times differ) in one of its own.
    """
    held: set[int] = set()
    done = [action for action, outcome, _ in items if outcome.status == "done"]
    if done:
        table = connection.ops.quote_name(Action._meta.db_table)
        mine = " OR ".join(["(id = %s AND attempts = %s)"] * len(done))
        rows = _returning_ids(
            f"UPDATE {table} SET status = %s, lease_until = NULL, last_error = NULL, input_round = NULL, done_at = %s "
            f"WHERE status = %s AND leased_by = %s AND ({mine}) RETURNING id",
            [
                Action.DONE,
                connection.ops.adapt_datetimefield_value(now),
                Action.LEASED,
                worker,
                *(v for action in done for v in (action.pk, action.attempts)),
            ],
        )
        held.update(int(i) for (i,) in rows)
    for action, outcome, _ in items:
        if outcome.status == "done":
            continue
        values: dict[str, Any] = {
            "status": _ACTION_STATUS[outcome.status],
            "lease_until": None,
            "last_error": outcome.error,
        }
        if outcome.status == "retry":
            values["next_attempt_at"] = now + timedelta(seconds=backoff(action.attempts))
            values["queued_at"] = now
        if outcome.status == "input":
            values["input_round"] = {"state": outcome.state, "inputs": {}}
        mine_only = Action.objects.filter(
            pk=action.pk, status=Action.LEASED, leased_by=worker, attempts=action.attempts
        )
        if mine_only.update(**values) == 1:
            held.add(action.pk)
            for name, value in values.items():
                setattr(action, name, value)
    return held


def record_batch(worker: str, items: list[tuple[Action, Outcome, float]]) -> list[str]:
    """Store the outcomes of attempts (action, outcome, seconds) in one transaction, each only
    if this worker still holds the action's lease. Returns each outcome, or "lease-lost"."""
    now = timezone.now()
    with transaction.atomic():
        held = _close_leases(worker, now, items)
        mine = [(action, outcome, seconds) for action, outcome, seconds in items if action.pk in held]
        for action, _, _ in items:
            if action.pk not in held:
                # The lease ran out and the sweeper took the action back: its verdict stands.
                logger.warning("action #%s: lease lost before the outcome was recorded", action.pk)
        if mine:
            _finish(worker, now, mine)
    return [outcome.status if action.pk in held else "lease-lost" for action, outcome, _ in items]


def _finish(worker: str, now: datetime, items: list[tuple[Action, Outcome, float]]) -> None:
    """The rest of recording held leases: the attempts, the calls' moves, the hooks."""
    update_each(
        Attempt.objects.filter(reduce(or_, (Q(action_id=a.pk, number=a.attempts) for a, _, _ in items))),
        "action_id",
        {a.pk: {"finished_at": now, "outcome": o.status, "error": o.error} for a, o, _ in items},
    )
    moves = []
    hooks = []
    for action, outcome, seconds in items:
        if outcome.status == "input":
            _wait_for_input(action, outcome)
            continue
        status = _ACTION_STATUS[outcome.status]
        if status == Action.DONE:
            action.status, action.lease_until, action.last_error, action.done_at = status, None, None, now
        fields: dict[str, Any] = {
            "attempts": action.attempts,
            "error": outcome.error,
            "is_error": outcome.status != "done",
            "duration_ms": round(seconds * 1000, 2),
        }
        if outcome.result is not None:
            fields["result"] = outcome.result
        if status in (Action.DONE, Action.DEAD, Action.UNKNOWN):
            fields["finished_at"] = now
        detail = {
            "attempt": action.attempts,
            "error": outcome.error,
            "next_attempt_at": action.next_attempt_at.isoformat() if status == Action.PENDING else None,
        }
        event = life.Event(_EVENT_KIND[outcome.status], worker, detail, now)
        moves.append(life.Move(action.call, CALL_STATUS[status], fields, event))
        if status == Action.PENDING:
            delay = max(0.0, (action.next_attempt_at - now).total_seconds())
            hooks.append(functools.partial(_queue_retry, action.pk, delay))
        if status == Action.DEAD:
            hooks.append(functools.partial(_alert, action.pk))
    _announce([action for action, _, _ in items])
    life.apply(moves)
    for hook in hooks:
        transaction.on_commit(hook)


def _wait_for_input(action: Action, outcome: Outcome) -> None:
    """The action gave its worker back: a person is asked for each of the round's requests
    (the call waits for input meanwhile); answered, the call resumes (`on_resumed`)."""
    server = action.call.server_name
    rows = {
        key: inputs.open_request(
            action.call_id,
            InputAsk(server=server, params=request.get("params") or {}, era="modern", key=key),
            resumes=True,
        ).pk
        for key, request in (outcome.requests or {}).items()
    }
    action.input_round = {"state": outcome.state, "inputs": rows}
    Action.objects.filter(pk=action.pk).update(input_round=action.input_round)


def record(action: Action, worker: str, outcome: Outcome, seconds: float) -> str:
    """Store an attempt's outcome, if this worker still holds the lease."""
    return record_batch(worker, [(action, outcome, seconds)])[0]


def _queue_retry(action_id: int, delay: float) -> None:
    try:
        current_app.send_task(DELIVER_TASK, (action_id,), countdown=delay)
    except Exception as exc:  # boundary: the sweeper re-queues due actions
        logger.warning("action #%s: retry not queued (%s); the sweeper will pick it up", action_id, exc)


def _alert(action_id: int) -> None:
    Action.objects.filter(pk=action_id).update(alerted=True)
    send_event_on_commit("outbox.dead_letter", {"id": action_id})
    if settings.PATCHBAY_ALERT_WEBHOOK:
        try:
            current_app.send_task(ALERT_TASK, (action_id,))
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
            fields: dict[str, Any] = {"error": error, "attempts": action.attempts}
            if action.status in (Action.DEAD, Action.UNKNOWN):
                fields.update(is_error=True, finished_at=now)
            event = life.Event("lease_expired", "", {"attempt": action.attempts, "then": action.status})
            _announce([action])
            life.move(action.call, CALL_STATUS[action.status], event, **fields)
            if action.status == Action.PENDING:
                transaction.on_commit(functools.partial(_queue_delivery, action.pk))
            if action.status == Action.DEAD:
                transaction.on_commit(functools.partial(_alert, action.pk))
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
    done = {"reclaimed": reclaim_expired_leases(), "requeued": requeue_due(), "expired": expire_waiting()}
    inputs_expired = inputs.expire_due()  # a round nobody answered resumes its call, answered "cancel"
    if inputs_expired:
        done["inputs_expired"] = inputs_expired
    return done


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
        event = life.Event("redriven", actor, {"key": action.idempotency_key})
        transaction.on_commit(functools.partial(_queue_delivery, action.pk))
        _announce([action])
        life.move(action.call, Call.QUEUED, event, finished_at=None, is_error=False, error=None)
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
        if status == Action.DISCARDED:
            outcome = {"is_error": True, "error": {"kind": "discarded", "message": resolution}}
        else:
            # Someone checked: it did take effect. What was unknown is no longer an error.
            outcome = {"is_error": False, "error": None}
        event = life.Event(status, actor, {"resolution": resolution})
        _announce([action])
        life.move(action.call, call_status, event, finished_at=now, **outcome)
    return action
