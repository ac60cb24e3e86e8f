"""Delivery in batches: what one wake-up does (`actions.drain`, the `deliver` task).

A worker claims several due actions in one statement (oldest first, never one someone else
holds), sends them concurrently, each with its own key, and records their outcomes in one
transaction, each only if its lease is still held. Wake-ups are coalesced: while one is
queued and no worker has started on it, a commit sends none.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.fixtures import Settings

from hostapp.calls.models import Call, CallEvent
from hostapp.catalog.actions import set_enabled
from hostapp.catalog.models import Server
from hostapp.outbox import actions, tasks
from hostapp.outbox.models import Action, Attempt

from .conftest import ERRORS, Wakeups, bundled_tasks, listed_server, received, server_rows, start

pytestmark = pytest.mark.django_db(transaction=True)

Recorder = Callable[..., tuple[Server, Path]]


def queued(n: int, tool: str = "todo__add") -> list[Action]:
    """N actions from N calls, due one millisecond apart (oldest first)."""
    made = [start(tool, {"title": f"task {i}"}).action for i in range(n)]
    base = timezone.now() - timedelta(seconds=10)
    for i, action in enumerate(made):
        Action.objects.filter(pk=action.pk).update(next_attempt_at=base + timedelta(milliseconds=i))
    return made


def states(made: list[Action]) -> list[tuple[str, str, int]]:
    rows = {a.pk: (a.status, a.leased_by, a.attempts) for a in Action.objects.filter(pk__in=[m.pk for m in made])}
    return [rows[m.pk] for m in made]


# --- claiming a batch ----------------------------------------------------------------------------


def test_a_batch_claim_takes_the_oldest_due_actions_nobody_holds() -> None:
    listed_server("todo")
    made = queued(6)
    Action.objects.filter(pk=made[1].pk).update(next_attempt_at=timezone.now() + timedelta(minutes=5))
    assert actions.claim(made[2].pk, "worker-2@test") is not None  # someone else's

    first = actions.claim_batch("worker-1@test", 2)
    second = actions.claim_batch("worker-1@test", 2)
    third = actions.claim_batch("worker-1@test", 2)

    assert [a.pk for a in first] == [made[0].pk, made[3].pk]
    assert [a.pk for a in second] == [made[4].pk, made[5].pk]
    assert third == []
    assert [s[0] for s in states(made)] == ["leased", "pending", "leased", "leased", "leased", "leased"]
    assert [s[1] for s in states(made)] == ["worker-1@test", "", "worker-2@test"] + ["worker-1@test"] * 3
    for action in first + second:
        assert (action.status, action.attempts, action.lease_until is not None) == (Action.LEASED, 1, True)
        assert (action.call.status, action.call.attempts, action.call.started_at is not None) == (Call.RUNNING, 1, True)
        assert list(Attempt.objects.filter(action=action).values_list("number", "worker", "outcome")) == [
            (1, "worker-1@test", "started")
        ]


def test_a_batch_claim_keeps_a_calls_first_start_and_counts_its_attempts() -> None:
    listed_server("todo")
    [action] = queued(1)
    earlier = timezone.now() - timedelta(hours=1)
    Call.objects.filter(pk=action.call_id).update(started_at=earlier)
    Action.objects.filter(pk=action.pk).update(attempts=2)

    [claimed] = actions.claim_batch("worker-1@test", 5)

    assert (claimed.attempts, claimed.call.attempts, claimed.call.started_at) == (3, 3, earlier)
    assert Attempt.objects.get(action=action).number == 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: SQLite locks the whole database")
def test_a_batch_claim_skips_rows_another_transaction_has_locked_without_waiting() -> None:
    listed_server("todo")
    made = queued(4)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(Action.objects.select_for_update().filter(pk__in=[made[0].pk, made[2].pk]))
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        began = time.monotonic()
        batch = actions.claim_batch("worker-1@test", 10)
        took = time.monotonic() - began
    finally:
        release.set()
        holder.join(timeout=10)

    assert [a.pk for a in batch] == [made[1].pk, made[3].pk]
    assert took < 5
    # Once the other transaction ends, the rows it held are due again for anyone.
    assert [a.pk for a in actions.claim_batch("worker-1@test", 10)] == [made[0].pk, made[2].pk]


def test_concurrent_batch_claims_give_each_action_to_exactly_one_worker() -> None:
    listed_server("todo")
    made = queued(30)
    won: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(won))

    def claimer(name: str) -> None:
        try:
            barrier.wait(timeout=30)
            while batch := actions.claim_batch(f"worker-{name}@test", 4):
                won[name].extend(a.pk for a in batch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(name,)) for name in won]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    claimed = [pk for pks in won.values() for pk in pks]
    assert sorted(claimed) == sorted(a.pk for a in made)
    assert Attempt.objects.filter(action__in=made).count() == 30
    assert set(Action.objects.filter(pk__in=claimed).values_list("attempts", flat=True)) == {1}
    assert set(Call.objects.filter(action__in=made).values_list("status", flat=True)) == {Call.RUNNING}


# --- delivering a batch --------------------------------------------------------------------------


def test_one_wake_up_delivers_every_due_action_each_once_with_its_own_key(tmp_path: Path) -> None:
    bundled_tasks(tmp_path)
    calls = [start("tasks__add", {"title": f"errand {i}"}) for i in range(5)]

    assert tasks.deliver(calls[2].action.pk) == {"done": 5}

    db = tmp_path / "tasks.sqlite3"
    made = dict(server_rows(db, "SELECT title, id FROM tasks WHERE title LIKE 'errand %'"))
    keys = dict(server_rows(db, "SELECT key, result_json FROM idempotency_keys"))
    assert sorted(made) == [f"errand {i}" for i in range(5)]
    assert sorted(keys) == sorted(c.action.idempotency_key for c in calls)
    for call in calls:
        action = Action.objects.select_related("call").get(pk=call.action.pk)
        assert (action.status, action.attempts, action.lease_until) == (Action.DONE, 1, None)
        assert list(Attempt.objects.filter(action=action).values_list("number", "outcome")) == [(1, "done")]
        # Each call has its own answer: the task made under its key, with its title.
        assert action.call.status == Call.SUCCEEDED
        task = action.call.result["structuredContent"]
        assert (task["title"], task["id"]) == (call.arguments["title"], made[call.arguments["title"]])
        assert json.loads(keys[action.idempotency_key])["id"] == task["id"]
        assert action.call.duration_ms is not None
        assert list(CallEvent.objects.filter(call=call).values_list("kind", flat=True)) == [
            "created",
            "queued",
            "succeeded",
        ]


def test_in_a_batch_one_action_fails_and_the_others_succeed(recorder: Recorder, settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 60
    _, log = recorder("rec")
    off, _ = recorder("off")
    ok = [start("rec__plain", {"text": f"ok {i}"}) for i in range(3)]
    failing = start("rec__fail")
    held_back = start("off__plain", {"text": "not sent"})
    set_enabled(off, False)

    assert actions.drain("worker-1@test") == {"done": 3, "dead": 1, "retry": 1}

    for call in ok:
        action = Action.objects.select_related("call").get(call=call)
        assert (action.status, action.call.status, action.call.is_error) == (Action.DONE, Call.SUCCEEDED, False)
    # No error is SQL NULL, as saving None stores it (not a JSON null), in a batch of mixed outcomes too.
    assert Call.objects.filter(pk__in=[c.pk for c in ok], error__isnull=True).count() == 3
    assert Action.objects.filter(call__in=ok, last_error__isnull=True).count() == 3
    assert Attempt.objects.filter(action__call__in=ok, error__isnull=True).count() == 3
    dead = Action.objects.select_related("call").get(call=failing)
    assert (dead.status, dead.last_error["message"]) == (Action.DEAD, "the disk is full")
    assert (dead.call.status, dead.call.is_error, dead.call.result["isError"]) == (Call.DEAD, True, True)
    assert dead.call.finished_at is not None
    assert dead.alerted
    later = Action.objects.select_related("call").get(call=held_back)
    assert (later.status, later.last_error["reason"], later.lease_until) == (Action.PENDING, "disabled", None)
    assert later.next_attempt_at > timezone.now() - timedelta(seconds=1)
    assert (later.call.status, later.call.finished_at) == (Call.QUEUED, None)
    kinds = {
        c.pk: list(CallEvent.objects.filter(call=c).values_list("kind", flat=True))[-1] for c in Call.objects.all()
    }
    assert kinds == {
        **{c.pk: "succeeded" for c in ok},
        failing.pk: "dead_lettered",
        held_back.pk: "retry_scheduled",
    }
    assert sorted(c["tool"] for c in received(log)) == ["fail", "plain", "plain", "plain"]


def test_a_lost_lease_in_a_batch_leaves_that_action_alone_and_records_the_others() -> None:
    listed_server("todo")
    made = queued(4)
    batch = actions.claim_batch("worker-1@test", 4)
    # While the worker was busy: the sweeper took back #2's lease and the same worker (another
    # of its threads) claimed it again: same name, a later attempt. #3's lease went to someone else.
    Action.objects.filter(pk=made[1].pk).update(attempts=2)
    Action.objects.filter(pk=made[2].pk).update(leased_by="worker-2@test")
    outcomes = [
        actions.Outcome("done", result={"content": []}),
        actions.Outcome("done", result={"content": []}),
        actions.Outcome("dead", error=ERRORS["dead"]),
        actions.Outcome("unknown", error=ERRORS["unknown"]),
    ]

    recorded = actions.record_batch("worker-1@test", [(a, o, 0.01) for a, o in zip(batch, outcomes, strict=True)])

    assert recorded == ["done", "lease-lost", "lease-lost", "unknown"]
    assert [s[0] for s in states(made)] == [Action.DONE, Action.LEASED, Action.LEASED, Action.UNKNOWN]
    statuses = dict(Call.objects.filter(action__in=made).values_list("action__id", "status"))
    assert [statuses[a.pk] for a in made] == [Call.SUCCEEDED, Call.RUNNING, Call.RUNNING, Call.UNKNOWN]
    outcome_of = dict(Attempt.objects.filter(action__in=made).values_list("action_id", "outcome"))
    assert [outcome_of[a.pk] for a in made] == ["done", "started", "started", "unknown"]
    assert not CallEvent.objects.filter(call_id__in=[made[1].call_id, made[2].call_id], actor="worker-1@test").exists()


def test_a_batch_is_recorded_with_as_many_statements_as_one_action(recorder: Recorder) -> None:
    recorder()
    calls = [start("rec__plain", {"text": str(i)}) for i in range(9)]

    with CaptureQueriesContext(connection) as one:
        assert actions.deliver(calls[0].action.pk, "worker-1@test") == "done"
    with CaptureQueriesContext(connection) as eight:
        assert actions.drain("worker-1@test", limit=10) == {"done": 8}

    assert len(eight.captured_queries) == len(one.captured_queries)
    assert len(one.captured_queries) <= 14


def test_a_request_that_fails_unexpectedly_leaves_its_action_leased_for_the_sweeper(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder()
    calls = [start("rec__plain", {"text": str(i)}) for i in range(3)]
    real = actions._send_all

    def broken_second(sends: list[Any], worker: str) -> dict[int, tuple[Any, float]]:
        out = real(sends, worker)
        out[1] = (RuntimeError("the pool broke"), 0.0)
        return out

    monkeypatch.setattr(actions, "_send_all", broken_second)

    assert actions.drain("worker-1@test") == {"error": 1}

    statuses = [Action.objects.get(call=c).status for c in calls]
    assert statuses == [Action.DONE, Action.LEASED, Action.DONE]


# --- live events and wake-ups --------------------------------------------------------------------


def test_a_batch_is_announced_in_one_event_per_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from hostapp.core import events

    listed_server("todo")
    made = queued(3)
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "_send", lambda kind, data: sent.append((kind, data)))
    ids = [a.pk for a in made]
    call_ids = [a.call_id for a in made]

    batch = actions.claim_batch("worker-1@test", 3)
    assert sent == [
        ("outbox.changed", {"ids": ids, "status": "leased"}),
        ("call.changed", {"ids": call_ids, "status": "running", "tools": ["todo__add"]}),
    ]
    sent.clear()
    actions.record_batch(
        "worker-1@test",
        [
            (batch[0], actions.Outcome("done", result={"content": []}), 0.01),
            (batch[1], actions.Outcome("dead", error=ERRORS["dead"]), 0.01),
            (batch[2], actions.Outcome("done", result={"content": []}), 0.01),
        ],
    )
    # One event per status and kind (in no particular order between kinds); the alert last.
    assert sorted(sent, key=repr) == sorted(
        [
            ("outbox.changed", {"ids": [ids[0], ids[2]], "status": "done"}),
            ("call.changed", {"ids": [call_ids[0], call_ids[2]], "status": "succeeded", "tools": ["todo__add"]}),
            ("outbox.changed", {"ids": [ids[1]], "status": "dead"}),
            ("call.changed", {"ids": [call_ids[1]], "status": "dead", "tools": ["todo__add"]}),
            ("outbox.dead_letter", {"id": ids[1]}),
        ],
        key=repr,
    )
    assert sent[-1] == ("outbox.dead_letter", {"id": ids[1]})


def test_one_action_is_announced_as_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    from hostapp.core import events

    listed_server("todo")
    [action] = queued(1)
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "_send", lambda kind, data: sent.append((kind, data)))

    actions.claim(action.pk, "worker-1@test")

    assert sent == [
        ("outbox.changed", {"id": action.pk, "status": "leased"}),
        ("call.changed", {"id": action.call_id, "status": "running", "tool": "todo__add"}),
    ]


def test_commits_share_a_wake_up_until_a_worker_starts_on_it(wakeups: Wakeups, monkeypatch: pytest.MonkeyPatch) -> None:
    listed_server("todo")
    monkeypatch.setattr(actions, "deliver_claimed", lambda batch, worker: [])  # claimed is enough here

    a = start("todo__add", {"title": "a"}).action
    start("todo__add", {"title": "b"})
    start("todo__add", {"title": "c"})
    assert wakeups.deliveries() == [a.pk]

    assert len(actions.claim_batch("worker-1@test", 10)) == 3  # no worker started on it: still shared
    start("todo__add", {"title": "d"})
    assert wakeups.deliveries() == [a.pk]

    actions.drain("worker-1@test", limit=5)  # a worker starts on it: the next commit wakes one again
    e = start("todo__add", {"title": "e"}).action
    start("todo__add", {"title": "f"})
    start("todo__add", {"title": "g"})
    assert wakeups.deliveries() == [a.pk, e.pk]

    actions.drain("worker-1@test", limit=2)  # e, f: a full batch wakes another worker (0: whatever is due)
    assert wakeups.deliveries() == [a.pk, e.pk, 0]


def test_without_an_answer_about_the_flag_every_commit_wakes_a_worker(
    wakeups: Wakeups, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed_server("todo")
    monkeypatch.setattr(actions, "_flag_down_until", 0.0)
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # the flag's Redis does not answer; the broker does

    first = start("todo__add", {"title": "a"}).action
    second = start("todo__add", {"title": "b"}).action

    assert wakeups.deliveries() == [first.pk, second.pk]
