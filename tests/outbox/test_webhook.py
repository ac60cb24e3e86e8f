"""The dead-letter webhook: a real HTTP receiver on 127.0.0.1 gets each new dead letter's summary.

The alert task is queued on commit when an action becomes a dead letter and
PATCHBAY_ALERT_WEBHOOK is set; the tests read it from the broker and run the task function
themselves, as a worker would. An answer of 500, or no answer at all, makes the task raise an
`httpx.HTTPError`, which Celery retries with backoff.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pytest_django.fixtures import Settings

from hostapp.catalog.actions import record_tools
from hostapp.catalog.models import Server
from hostapp.outbox import actions
from hostapp.outbox.models import Action
from hostapp.outbox.tasks import send_dead_letter_alert
from tests.fixtures.webhook_receiver import WebhookReceiver
from tests.helpers import free_port

from .conftest import WRITE_TOOL, Wakeups, action_in, listed_server

ALERT_TASK = "hostapp.outbox.dead_letter_alert"


@pytest.fixture
def todo(db: None) -> Server:
    return listed_server("todo")


@pytest.fixture
def hook(settings: Settings) -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as receiver:
        settings.PATCHBAY_ALERT_WEBHOOK = receiver.url
        yield receiver


def alerts_queued(wakeups: Wakeups) -> list[int]:
    return [args[0] for task, args in wakeups.queued() if task == ALERT_TASK]


def test_it_posts_the_dead_letters_summary(todo: Server, hook: WebhookReceiver) -> None:
    action = action_in(Action.DEAD)

    send_dead_letter_alert(action.pk)

    [got] = hook.wait_for(1)
    assert (got.method, got.path) == ("POST", "/hooks/patchbay")
    assert got.headers["content-type"] == "application/json"
    assert got.json == {
        "event": "dead_letter",
        "action_id": action.pk,
        "call_id": action.call_id,
        "tool": "todo__add",
        "server": "todo",
        "attempts": 1,
        "idempotency_key": action.idempotency_key,
        "last_error": "the disk is full",
        "requester": "cli",
    }


def test_a_new_dead_letter_queues_the_alert_on_commit(
    todo: Server, hook: WebhookReceiver, wakeups: Wakeups, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        action = action_in(Action.DEAD)

    assert alerts_queued(wakeups) == [action.pk]
    # What a worker then does with it:
    send_dead_letter_alert(*[args for task, args in wakeups.queued() if task == ALERT_TASK][0])
    assert hook.wait_for(1)[0].json["action_id"] == action.pk


def test_a_lease_that_ran_out_on_the_last_attempt_alerts_too(
    db: None, hook: WebhookReceiver, wakeups: Wakeups, settings: Settings, django_capture_on_commit_callbacks
) -> None:
    server = Server.objects.create(name="todo", command="/bin/true", trusted=True)
    idempotent = {**WRITE_TOOL, "annotations": {**WRITE_TOOL["annotations"], "idempotentHint": True}}
    record_tools(server, [idempotent])
    server.tools.update(outbox_max_attempts=1)
    settings.PATCHBAY_OUTBOX_LEASE = 0  # the worker's lease runs out at once
    action = action_in(Action.LEASED)

    with django_capture_on_commit_callbacks(execute=True):
        assert actions.reclaim_expired_leases() == 1

    assert Action.objects.get(pk=action.pk).status == Action.DEAD
    assert alerts_queued(wakeups) == [action.pk]


def test_no_alert_is_queued_without_a_webhook(
    todo: Server, settings: Settings, wakeups: Wakeups, django_capture_on_commit_callbacks
) -> None:
    settings.PATCHBAY_ALERT_WEBHOOK = ""

    with django_capture_on_commit_callbacks(execute=True):
        action_in(Action.DEAD)

    assert alerts_queued(wakeups) == []


@pytest.mark.parametrize("outcome", ["unknown", "retry", "done"])
def test_only_a_dead_letter_raises_an_alert(
    todo: Server, hook: WebhookReceiver, wakeups: Wakeups, outcome: str, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        action_in(outcome)

    assert alerts_queued(wakeups) == []


def test_a_receiver_answering_500_makes_the_task_raise_so_celery_retries_it(todo: Server, settings: Settings) -> None:
    action = action_in(Action.DEAD)
    with WebhookReceiver(statuses=[500]) as receiver:
        settings.PATCHBAY_ALERT_WEBHOOK = receiver.url

        with pytest.raises(httpx.HTTPStatusError) as raised:
            send_dead_letter_alert(action.pk)
        assert raised.value.response.status_code == 500

        # The retry (what Celery runs after the backoff) gets through.
        send_dead_letter_alert(action.pk)
        first, second = receiver.wait_for(2)
    assert first.json == second.json
    assert first.json["action_id"] == action.pk


def test_an_unreachable_receiver_makes_the_task_raise_too(todo: Server, settings: Settings) -> None:
    action = action_in(Action.DEAD)
    settings.PATCHBAY_ALERT_WEBHOOK = f"http://127.0.0.1:{free_port()}/hook"

    with pytest.raises(httpx.ConnectError):
        send_dead_letter_alert(action.pk)


def test_celery_retries_the_alert_on_http_errors_with_backoff() -> None:
    assert issubclass(httpx.HTTPStatusError, send_dead_letter_alert.autoretry_for)
    assert issubclass(httpx.ConnectError, send_dead_letter_alert.autoretry_for)
    assert send_dead_letter_alert.max_retries >= 3
    assert send_dead_letter_alert.retry_backoff
    assert send_dead_letter_alert.retry_jitter


def test_nothing_is_sent_once_the_webhook_is_unset(todo: Server, hook: WebhookReceiver, settings: Settings) -> None:
    action = action_in(Action.DEAD)
    settings.PATCHBAY_ALERT_WEBHOOK = ""

    assert send_dead_letter_alert(action.pk) is None

    assert hook.requests == []


def test_nothing_is_sent_for_an_action_that_is_gone(todo: Server, hook: WebhookReceiver) -> None:
    assert send_dead_letter_alert(987654) is None

    assert hook.requests == []
