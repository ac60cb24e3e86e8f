"""A call's life (hostapp/calls/life.py): the one writer of calls and their events, the table
of allowed moves, conditional moves, and the live event after each."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from hostapp.calls import actions, life
from hostapp.calls.models import Call, CallEvent
from hostapp.core import events

from .conftest import requester

pytestmark = pytest.mark.django_db

ARGS = {"disk": "sdb"}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The live events that leave after commit (kind, data)."""
    out: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "_send", lambda kind, data: out.append((kind, data)))
    return out


def waiting() -> Call:
    return actions.start_call("ops__wipe", dict(ARGS), requester(name="deploy-bot"))


def test_every_state_has_its_row_in_the_table_and_the_final_ones_lead_nowhere() -> None:
    assert set(life.MOVES) == {life.NEW, *(status for status, _ in Call.STATUSES)}
    for status in (Call.SUCCEEDED, Call.EXPIRED, Call.BLOCKED):
        assert life.MOVES[status] == frozenset()
    # A denial leads back only to waiting: a person reopens one the host made on a suggestion.
    assert life.MOVES[Call.DENIED] == {Call.WAITING}
    assert life.MOVES[life.NEW] == {Call.WAITING, Call.QUEUED, Call.RUNNING, Call.BLOCKED}


@pytest.mark.parametrize(
    ("frm", "to"),
    [
        (Call.WAITING, Call.SUCCEEDED),  # never delivered without going through the outbox
        (Call.WAITING, Call.RUNNING),
        (Call.SUCCEEDED, Call.QUEUED),  # final
        (Call.DENIED, Call.QUEUED),
        (Call.QUEUED, Call.SUCCEEDED),  # a worker takes it first
        (Call.FAILED, Call.SUCCEEDED),
    ],
)
def test_a_move_the_table_does_not_allow_raises_and_writes_nothing(ops: Any, frm: str, to: str) -> None:
    call = waiting()
    Call.objects.filter(pk=call.pk).update(status=frm)
    call.status = frm
    before = CallEvent.objects.filter(call=call).count()

    with pytest.raises(life.IllegalMove):
        life.move(call, to, life.Event("odd"))

    assert Call.objects.get(pk=call.pk).status == frm
    assert CallEvent.objects.filter(call=call).count() == before


def test_a_new_call_can_only_be_made_in_a_state_a_decision_leaves() -> None:
    with pytest.raises(life.IllegalMove):
        life.check(life.NEW, Call.SUCCEEDED)


def test_a_move_writes_the_row_its_event_and_tells_open_pages_after_the_commit(
    ops: Any, sent: list[tuple[str, dict[str, Any]]], django_capture_on_commit_callbacks: Any
) -> None:
    call = waiting()
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        life.move(call, Call.DENIED, life.Event("denied", "april", {"reason": "no"}), denial_reason="no")
        assert sent == []  # not before the commit

    row = Call.objects.get(pk=call.pk)
    assert (row.status, row.denial_reason) == (Call.DENIED, "no")
    assert [(e.kind, e.actor, e.detail) for e in row.events.order_by("pk")][-1] == ("denied", "april", {"reason": "no"})
    assert sent == [("call.changed", {"id": call.pk, "status": Call.DENIED, "tool": "ops__wipe"})]


def test_a_call_moved_by_someone_else_since_it_was_read_is_not_moved_again(ops: Any) -> None:
    """Two approvers read the same waiting call; the second one's move finds it gone."""
    call = waiting()
    stale = Call.objects.get(pk=call.pk)
    life.move(call, Call.DENIED, life.Event("denied", "april"))

    with pytest.raises(life.MovedMeanwhile), transaction.atomic():
        life.move(stale, Call.QUEUED, life.Event("approved", "bob"))

    assert Call.objects.get(pk=call.pk).status == Call.DENIED
    assert not CallEvent.objects.filter(call=call, kind="approved").exists()


def test_many_moves_are_one_update_and_all_or_nothing(ops: Any) -> None:
    calls = [waiting() for _ in range(3)]
    stale = Call.objects.get(pk=calls[2].pk)
    life.move(calls[2], Call.DENIED, life.Event("denied", "april"))

    with pytest.raises(life.MovedMeanwhile), transaction.atomic():
        life.apply([life.Move(c, Call.EXPIRED, {}, life.Event("expired")) for c in [calls[0], calls[1], stale]])

    assert [Call.objects.get(pk=c.pk).status for c in calls] == [Call.WAITING, Call.WAITING, Call.DENIED]
    with CaptureQueriesContext(connection) as queries:
        life.apply([life.Move(c, Call.EXPIRED, {"denial_reason": f"late {i}"}) for i, c in enumerate(calls[:2])])
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1 and "CASE" in updates[0]
    assert [(c.status, c.denial_reason) for c in Call.objects.filter(pk__in=[calls[0].pk, calls[1].pk])] == [
        (Call.EXPIRED, "late 1"),
        (Call.EXPIRED, "late 0"),
    ]


def test_what_a_server_sends_is_kept_as_the_json_columns_can_keep_it(ops: Any) -> None:
    """PostgreSQL's jsonb takes no NUL character, and no JSON column takes NaN."""
    call = waiting()
    error = {"message": "bad\x00 thing", "value": float("nan")}
    life.move(call, Call.DENIED, life.Event("denied", "april", {"error": error}), error=error)

    row = Call.objects.get(pk=call.pk)
    assert row.error == {"message": "bad thing", "value": None}
    assert row.events.order_by("pk").last().detail == {"error": {"message": "bad thing", "value": None}}
