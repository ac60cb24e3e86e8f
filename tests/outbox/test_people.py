"""People's decisions on the outbox: redrive (same key), discard (with a reason), mark done.

Actions are brought to their state by the worker's own steps (`claim` and `record`) on a
catalog recorded as a refresh would; no server process runs unless a test delivers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings

from hostapp.calls.models import Call, CallEvent
from hostapp.catalog.actions import set_enabled
from hostapp.catalog.models import Server, Tool
from hostapp.outbox import actions
from hostapp.outbox.actions import OutboxError
from hostapp.outbox.models import Action

from .conftest import Wakeups, action_in, listed_server, received

Recorder = Callable[..., tuple[Server, Path]]


@pytest.fixture
def todo(db: None) -> Server:
    return listed_server("todo")


def fresh(action: Action) -> Action:
    return Action.objects.select_related("call").get(pk=action.pk)


def last_event(action: Action) -> CallEvent:
    return CallEvent.objects.filter(call_id=action.call_id).order_by("-id").first()  # type: ignore[return-value]


# --- redrive -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [Action.DEAD, Action.UNKNOWN])
def test_a_dead_or_unknown_action_is_redriven_with_the_same_key(
    todo: Server, status: str, settings: Settings, django_capture_on_commit_callbacks, wakeups: Wakeups
) -> None:
    settings.PATCHBAY_OUTBOX_MAX_ATTEMPTS = 8
    action = action_in(status)
    key = action.idempotency_key

    with django_capture_on_commit_callbacks(execute=True):
        actions.redrive(action.pk, "mona")

    action = fresh(action)
    assert action.status == Action.PENDING
    assert action.idempotency_key == key
    assert action.attempts == 1  # the history stays; a fresh budget is added to it
    assert action.max_attempts == 1 + 8
    assert action.next_attempt_at <= timezone.now()
    assert (action.resolved_by, action.resolution) == ("mona", "redriven")
    call = action.call
    assert (call.status, call.finished_at) == (Call.QUEUED, None)
    event = last_event(action)
    assert (event.kind, event.actor, event.detail) == ("redriven", "mona", {"key": key})
    # A worker is woken once the decision is committed.
    assert wakeups.deliveries() == [action.pk]
    assert actions.claim(action.pk, "worker-2@test") is not None


def test_a_redrive_gives_the_tools_own_budget_of_attempts(todo: Server) -> None:
    Tool.objects.filter(exposed_name="todo__add").update(outbox_max_attempts=2)
    action = action_in(Action.DEAD)
    assert action.max_attempts == 2

    action = actions.redrive(action.pk, "mona")

    assert fresh(action).max_attempts == 1 + 2


@pytest.mark.parametrize("status", [Action.PENDING, Action.LEASED, Action.DONE, Action.DISCARDED])
def test_only_dead_or_unknown_actions_are_redriven(todo: Server, status: str) -> None:
    action = action_in(status)
    before = fresh(action)

    with pytest.raises(OutboxError, match="only dead or unknown ones are redriven"):
        actions.redrive(action.pk, "mona")

    after = fresh(action)
    assert (after.status, after.resolution, after.call.status) == (before.status, before.resolution, before.call.status)


def test_redriving_a_missing_action_says_so(db: None) -> None:
    with pytest.raises(Action.DoesNotExist):
        actions.redrive(987654, "mona")


@pytest.mark.django_db(transaction=True)
def test_a_redriven_action_reaches_the_server_with_its_first_key(recorder: Recorder) -> None:
    server, log = recorder()
    Tool.objects.filter(exposed_name="rec__plain").update(outbox_max_attempts=1)
    action = action_in(Action.PENDING, tool="rec__plain", arguments={"text": "hello"})
    set_enabled(server, False)
    assert actions.deliver(action.pk, "worker-1@test") == "dead"
    set_enabled(Server.objects.get(pk=server.pk), True)

    actions.redrive(action.pk, "mona")
    assert actions.deliver(action.pk, "worker-2@test") == "done"

    assert [c["meta"]["dev.patchbay/idempotencyKey"] for c in received(log)] == [action.idempotency_key]
    assert fresh(action).call.status == Call.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_an_unknown_outcome_redriven_is_sent_again_under_the_same_key(recorder: Recorder, settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_CALL_TIMEOUT = 1
    _, log = recorder()  # untrusted and without keys: a timeout is an unknown outcome
    action = action_in(Action.PENDING, tool="rec__slow", arguments={"seconds": 2})
    assert actions.deliver(action.pk, "worker-1@test") == "unknown"

    actions.redrive(action.pk, "mona")
    settings.PATCHBAY_OUTBOX_CALL_TIMEOUT = 10
    assert actions.deliver(action.pk, "worker-2@test") == "done"

    keys = [c["meta"]["dev.patchbay/idempotencyKey"] for c in received(log)]
    assert keys == [action.idempotency_key, action.idempotency_key]


# --- discard -------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   ", "\n"])
def test_discarding_needs_a_reason(todo: Server, reason: str) -> None:
    action = action_in(Action.DEAD)

    with pytest.raises(OutboxError, match="discarding needs a reason"):
        actions.discard(action.pk, "mona", reason)

    assert fresh(action).status == Action.DEAD


@pytest.mark.parametrize("status", [Action.DEAD, Action.UNKNOWN, Action.PENDING])
def test_a_discarded_action_is_over_and_its_call_failed_with_the_reason(todo: Server, status: str) -> None:
    action = action_in(status)

    actions.discard(action.pk, "mona", "  sent by hand instead  ")

    action = fresh(action)
    assert action.status == Action.DISCARDED
    assert (action.resolved_by, action.resolution) == ("mona", "discarded: sent by hand instead")
    assert action.done_at is not None
    call = action.call
    assert (call.status, call.is_error) == (Call.FAILED, True)
    assert call.error == {"kind": "discarded", "message": "discarded: sent by hand instead"}
    assert call.finished_at is not None
    event = last_event(action)
    assert (event.kind, event.actor) == ("discarded", "mona")
    # Nothing delivers it any more, even a wake-up that was already queued.
    assert actions.claim(action.pk, "worker-2@test") is None


@pytest.mark.parametrize("status", [Action.LEASED, Action.DONE, Action.DISCARDED])
def test_an_action_being_delivered_or_finished_cannot_be_discarded(todo: Server, status: str) -> None:
    action = action_in(status)

    with pytest.raises(OutboxError, match="cannot be discarded"):
        actions.discard(action.pk, "mona", "no longer wanted")

    assert fresh(action).status == status


# --- mark done -----------------------------------------------------------------------------------


def test_an_unknown_outcome_can_be_marked_done_by_a_person(todo: Server) -> None:
    action = action_in(Action.UNKNOWN)

    actions.mark_done(action.pk, "mona", "the task is in the list")

    action = fresh(action)
    assert action.status == Action.DONE
    assert (action.resolved_by, action.resolution) == ("mona", "marked done: the task is in the list")
    assert action.done_at is not None
    assert action.call.status == Call.SUCCEEDED
    assert action.call.finished_at is not None
    assert last_event(action).kind == "done"


def test_marking_done_without_a_note_says_only_that(todo: Server) -> None:
    action = action_in(Action.UNKNOWN)

    actions.mark_done(action.pk, "mona")

    assert fresh(action).resolution == "marked done"


def test_a_call_marked_done_reads_as_a_success(todo: Server) -> None:
    action = action_in(Action.UNKNOWN)

    actions.mark_done(action.pk, "mona")

    summary = fresh(action).call.summary()
    assert summary["status"] == Call.SUCCEEDED
    assert (summary["is_error"], summary["error"]) == (False, None)


@pytest.mark.parametrize("status", [Action.DEAD, Action.PENDING, Action.LEASED, Action.DONE, Action.DISCARDED])
def test_only_an_unknown_outcome_can_be_marked_done(todo: Server, status: str) -> None:
    action = action_in(status)

    with pytest.raises(OutboxError, match="cannot be marked done"):
        actions.mark_done(action.pk, "mona")

    assert fresh(action).status == status


# --- the call follows ----------------------------------------------------------------------------


def test_the_call_status_follows_the_action_through_a_whole_story(todo: Server) -> None:
    action = action_in(Action.PENDING)
    seen = [fresh(action).call.status]
    actions.claim(action.pk, "worker-1@test")
    seen.append(fresh(action).call.status)
    actions.record(fresh(action), "worker-1@test", actions.Outcome("unknown", error={"message": "lost"}), 0.1)
    seen.append(fresh(action).call.status)
    actions.redrive(action.pk, "mona")
    seen.append(fresh(action).call.status)
    claimed = actions.claim(action.pk, "worker-2@test")
    assert claimed is not None
    actions.record(claimed, "worker-2@test", actions.Outcome("dead", error={"message": "the disk is full"}), 0.1)
    seen.append(fresh(action).call.status)
    actions.discard(action.pk, "mona", "wrong list")
    seen.append(fresh(action).call.status)

    # A dead letter is the call's state too, until a person discards it (failed, for good).
    assert seen == [Call.QUEUED, Call.RUNNING, Call.UNKNOWN, Call.QUEUED, Call.DEAD, Call.FAILED]
    assert fresh(action).call.attempts == 2


def test_a_dead_letter_is_called_one_thing_on_every_page(todo: Server, admin_client: Client) -> None:
    action = action_in(Action.PENDING)
    claimed = actions.claim(action.pk, "worker-1@test")
    assert claimed is not None
    actions.record(claimed, "worker-1@test", actions.Outcome("dead", error={"message": "the disk is full"}), 0.1)

    call_page = admin_client.get(f"/calls/{action.call_id}/").content.decode()
    calls = admin_client.get("/calls/").content.decode()
    dead_letters = admin_client.get("/outbox/dead/").content.decode()

    assert '<span class="badge call-dead" id="call-status" data-status="dead">dead letter</span>' in call_page
    assert 'id="call-parked"' in call_page
    assert '<strong data-kind="dead_lettered">dead letter</strong>' in call_page
    assert "dead_lettered<" not in call_page
    assert '<span class="badge call-dead">dead letter</span>' in calls
    assert '<span class="badge action-dead">dead letter</span>' in dead_letters
