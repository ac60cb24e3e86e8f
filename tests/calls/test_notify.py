"""Approvers told outside the browser (hostapp/calls/notify.py): a webhook to a real HTTP
receiver on 127.0.0.1, email through Django's test outbox, a burst grouped into one message.

Calls are started through the real action; the send is queued on commit to a Redis of the
test's own, and the tests run the task functions themselves, as a worker would.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone
from pytest_django.fixtures import Settings

from hostapp.calls import actions, notify
from hostapp.calls.models import ApprovalNotice, Call, InputRequest
from hostapp.calls.tasks import notify_again, notify_approvers
from hostapp.catalog.models import Server
from tests.catalog.conftest import listed, make_server, tool_def
from tests.fixtures.webhook_receiver import WebhookReceiver
from tests.helpers import free_port
from tests.outbox.conftest import OwnRedis, Wakeups, broker

pytestmark = pytest.mark.django_db

BASE = "https://patchbay.example.com"
APPROVERS = ["april@example.com", "alice@example.com"]
# What an agent sends: none of it may reach a message.
ARGUMENTS = {"to": "bob@example.com", "body": "the password is hunter2"}
CLI = actions.Requester(Call.CLI, "cli")


class Boom(Exception):
    pass


@pytest.fixture(scope="module")
def _own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    redis.start()
    yield redis
    redis.close()


@pytest.fixture
def queue(_own_redis: OwnRedis, settings: Settings) -> Iterator[Wakeups]:
    """This test's broker and grouping key: a Redis of its own, empty at the start."""
    seen = Wakeups(_own_redis)
    seen.clear()
    with broker(_own_redis.url, settings):
        yield seen
    seen.client.close()


@pytest.fixture
def mail_tool(db: None, settings: Settings) -> Server:
    settings.PATCHBAY_PUBLIC_URL = BASE
    settings.PATCHBAY_APPROVER_WEBHOOK = ""
    settings.PATCHBAY_APPROVER_EMAILS = []
    settings.PATCHBAY_NOTIFY_GROUP = 10
    return listed(make_server("mail", trusted=True), tool_def("send"))


@pytest.fixture
def hook(mail_tool: Server, settings: Settings) -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as receiver:
        settings.PATCHBAY_APPROVER_WEBHOOK = receiver.url
        yield receiver


@pytest.fixture
def emails(mail_tool: Server, settings: Settings) -> list[str]:
    settings.PATCHBAY_APPROVER_EMAILS = APPROVERS
    return APPROVERS


def start(requester: actions.Requester = CLI) -> Call:
    call = actions.start_call("mail__send", ARGUMENTS, requester)
    assert call.status == Call.WAITING
    return call


def sends_queued(queue: Wakeups) -> list[tuple[str, list[Any]]]:
    return [(task, args) for task, args in queue.queued() if task.startswith("hostapp.calls.notify")]


def no_arguments_in(raw: bytes | str) -> None:
    text = raw.decode() if isinstance(raw, bytes) else raw
    assert "bob@example.com" not in text and "hunter2" not in text


# --- the webhook ------------------------------------------------------------------------------------


def test_it_posts_a_waiting_call_with_its_links_and_without_its_arguments(
    hook: WebhookReceiver, queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        call = start()

    # Nothing is sent in the request: one send is queued, due after the group's 10 seconds.
    assert hook.requests == []
    assert sends_queued(queue) == [(notify.GROUP_TASK, [])]
    [eta] = queue.etas()
    assert eta is not None
    assert 8 <= (datetime.fromisoformat(eta) - timezone.now()).total_seconds() <= 11

    assert notify_approvers() == 1

    [got] = hook.wait_for(1)
    assert got.headers["content-type"] == "application/json"
    no_arguments_in(got.body)
    body = got.json
    text = body["text"]
    assert text.startswith(f"*1 call waits for approval on Patchbay*: <{BASE}/calls/pending/|open the pending calls>")
    assert f"<{BASE}/calls/{call.pk}/|#{call.pk}> `mail__send` on mail" in text
    expires = call.approval_expires_at
    assert expires is not None
    assert f"asked by cli, expires {expires.astimezone(UTC):%Y-%m-%d %H:%M} UTC" in text
    assert "suggestion: ask" in text  # no history yet: the suggestion is to ask
    assert body["count"] == 1 and body["pending_url"] == f"{BASE}/calls/pending/"
    assert body["calls"] == [
        {
            "id": call.pk,
            "waiting_for": "approval",
            "tool": "mail__send",
            "server": "mail",
            "requester": "cli",
            "expires_at": expires.isoformat(),
            "suggestion": {"verdict": "ask", "probability": call.suggestion["probability"]},
            "url": f"{BASE}/calls/{call.pk}/",
        }
    ]
    # The notice is gone with the send: a second run tells of nothing.
    assert not ApprovalNotice.objects.exists()
    assert notify_approvers() == 0
    assert len(hook.requests) == 1


def test_a_request_for_input_reaches_the_approvers_too_without_the_servers_words(
    hook: WebhookReceiver, emails: list[str], queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    from hostapp.calls import inputs, life
    from hostapp.calls.policy import Decision
    from hostapp.catalog.models import Tool
    from hostapp.mcp import InputAsk

    tool = Tool.objects.select_related("server").get(exposed_name="mail__send")
    running = life.open_call(life.new_fields(tool, Decision(Call.RUN, ""), CLI, {}, "d", timezone.now()))
    ask = {"message": "Which mailbox, the secret one?", "requestedSchema": {"type": "object"}}
    with django_capture_on_commit_callbacks(execute=True):
        row = inputs.open_request(running.pk, InputAsk(server="mail", params=ask, era="legacy"))
        waiting = start()
    assert sends_queued(queue) == [(notify.GROUP_TASK, [])]

    assert notify_approvers() == 2

    [got] = hook.wait_for(1)
    assert "secret one" not in got.body.decode()
    body = got.json
    assert body["text"].startswith("*2 calls wait for a person on Patchbay*")
    assert (
        f"<{BASE}/calls/{running.pk}/|#{running.pk}> `mail__send` on mail · mail asks for input, asked by cli"
        in (body["text"])
    )
    facts = {c["id"]: c for c in body["calls"]}
    assert facts[running.pk]["waiting_for"] == "input"
    assert facts[running.pk]["expires_at"] == row.expires_at.isoformat()
    assert facts[waiting.pk]["waiting_for"] == "approval"
    assert mail.outbox[0].subject == "2 calls wait for a person on Patchbay"
    assert "mail asks for input, asked by cli" in mail.outbox[0].body

    # Answered before the send: nothing more is told of it.
    inputs.answer(row.pk, "decline", name="cli")
    with django_capture_on_commit_callbacks(execute=True):
        inputs.open_request(running.pk, InputAsk(server="mail", params=ask, era="legacy"))
    inputs.answer(InputRequest.objects.get(call=running, status="open").pk, "cancel", name="cli")
    assert notify_approvers() == 0


def test_what_an_agent_chose_cannot_make_a_link_or_a_mention(
    hook: WebhookReceiver, queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        start(actions.Requester(Call.CLI, "<!channel> & <https://evil.example|click>"))

    notify_approvers()

    text = hook.wait_for(1)[0].json["text"]
    assert "asked by &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;," in text
    assert "<!channel>" not in text and "<https://evil.example" not in text


def test_without_a_public_url_the_links_point_at_the_local_address(
    hook: WebhookReceiver, queue: Wakeups, settings: Settings, django_capture_on_commit_callbacks: Any
) -> None:
    settings.PATCHBAY_PUBLIC_URL = ""
    with django_capture_on_commit_callbacks(execute=True):
        call = start()

    notify_approvers()

    assert f"<http://127.0.0.1:8000/calls/{call.pk}/|#{call.pk}>" in hook.wait_for(1)[0].json["text"]


# --- email ----------------------------------------------------------------------------------------


def test_it_emails_the_approvers_a_plain_text_message(
    emails: list[str], queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        call = start()
    assert mail.outbox == []

    notify_approvers()

    [message] = mail.outbox
    assert message.subject == "1 call waits for approval on Patchbay"
    assert message.to == APPROVERS
    assert message.content_subtype == "plain"
    no_arguments_in(message.body)
    assert f"#{call.pk} mail__send on mail\n  asked by cli, expires " in message.body
    assert f"  {BASE}/calls/{call.pk}/\n" in message.body
    assert message.body.endswith(f"All pending calls: {BASE}/calls/pending/\n")


# --- grouping -------------------------------------------------------------------------------------


def test_a_burst_is_one_post_and_one_email_and_a_later_call_a_second_message(
    hook: WebhookReceiver, emails: list[str], queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        burst = [start(), start(), start()]
    # The first call of the quiet period scheduled the send; the others join it.
    assert sends_queued(queue) == [(notify.GROUP_TASK, [])]

    assert notify_approvers() == 3

    [first] = hook.wait_for(1)
    assert [c["id"] for c in first.json["calls"]] == [c.pk for c in burst]
    assert first.json["text"].startswith("*3 calls wait for approval on Patchbay*")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].subject == "3 calls wait for approval on Patchbay"
    assert all(f"{BASE}/calls/{c.pk}/" in mail.outbox[0].body for c in burst)

    # The send has begun: a call that waits from now on schedules the next one.
    with django_capture_on_commit_callbacks(execute=True):
        later = start()
    assert sends_queued(queue) == [(notify.GROUP_TASK, [])] * 2
    notify_approvers()

    _, second = hook.wait_for(2)
    assert [c["id"] for c in second.json["calls"]] == [later.pk]
    assert len(mail.outbox) == 2
    assert mail.outbox[1].subject == "1 call waits for approval on Patchbay"
    assert all(f"/calls/{c.pk}/" not in mail.outbox[1].body for c in burst)


def test_a_send_due_at_once_with_a_group_of_zero(
    hook: WebhookReceiver, queue: Wakeups, settings: Settings, django_capture_on_commit_callbacks: Any
) -> None:
    settings.PATCHBAY_NOTIFY_GROUP = 0
    with django_capture_on_commit_callbacks(execute=True):
        start()

    [eta] = queue.etas()
    assert eta is None or datetime.fromisoformat(eta) <= timezone.now()


def test_only_the_calls_still_waiting_are_named(
    hook: WebhookReceiver, queue: Wakeups, approver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        denied, waiting = start(), start()
        actions.deny(denied.pk, approver, "not today")

    assert notify_approvers() == 1

    assert [c["id"] for c in hook.wait_for(1)[0].json["calls"]] == [waiting.pk]


def test_nothing_is_told_of_calls_no_one_waits_for_any_more(
    hook: WebhookReceiver, queue: Wakeups, approver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        call = start()
        actions.deny(call.pk, approver, "not today")

    assert notify_approvers() == 0
    assert hook.requests == [] and not ApprovalNotice.objects.exists()


def test_a_call_that_waits_again_is_told_of_again_below_a_higher_one_told(
    hook: WebhookReceiver, queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        older, newer = start(), start()
    notify_approvers()

    # As `reopen` does: an older call waits again, inside the transaction that moves it.
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        notify.call_waiting(older)
    notify_approvers()

    first, second = hook.wait_for(2)
    assert [c["id"] for c in first.json["calls"]] == [older.pk, newer.pk]
    assert [c["id"] for c in second.json["calls"]] == [older.pk]


def test_a_wait_rolled_back_leaves_no_notice(
    hook: WebhookReceiver, queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(Boom), transaction.atomic():
        start()
        raise Boom

    assert callbacks == [] and sends_queued(queue) == []
    assert not ApprovalNotice.objects.exists() and not Call.objects.exists()


def test_nothing_configured_sends_nothing(
    mail_tool: Server, queue: Wakeups, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        start()

    assert sends_queued(queue) == []
    assert not ApprovalNotice.objects.exists()
    assert notify_approvers() == 0 and notify_approvers(overdue=True) == 0
    assert mail.outbox == []


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("down", ["500", "refused"])
def test_a_failing_webhook_loses_neither_the_email_nor_the_call(
    mail_tool: Server,
    emails: list[str],
    queue: Wakeups,
    settings: Settings,
    down: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with WebhookReceiver(statuses=[500]) as receiver:
        url = receiver.url if down == "500" else f"http://127.0.0.1:{free_port()}/hook"
        settings.PATCHBAY_APPROVER_WEBHOOK = url
        with django_capture_on_commit_callbacks(execute=True):
            call = start()
        queue.clear()

        assert notify_approvers() == 1

        assert Call.objects.get(pk=call.pk).status == Call.WAITING
        assert [m.subject for m in mail.outbox] == ["1 call waits for approval on Patchbay"]
        # The webhook alone is tried again, for this call.
        assert sends_queued(queue) == [(notify.RETRY_TASK, ["webhook", [call.pk]])]
        if down == "500":
            assert len(receiver.wait_for(1)) == 1
            notify_again("webhook", [call.pk])  # what the worker runs after the backoff
            _, again = receiver.wait_for(2)
            assert [c["id"] for c in again.json["calls"]] == [call.pk]
        else:
            with pytest.raises(notify.TryAgain, match="not reached"):
                notify_again("webhook", [call.pk])
    assert len(mail.outbox) == 1  # the email is not sent twice


def test_the_last_retry_says_it_gave_up_and_names_no_url(
    mail_tool: Server, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"http://127.0.0.1:{free_port()}/services/T000/B000/secret"
    settings.PATCHBAY_APPROVER_WEBHOOK = secret
    call = start()

    with caplog.at_level(logging.WARNING, logger="hostapp.calls.notify"):
        notify.send_again("webhook", [call.pk], last=True)

    assert f"approvers' webhook not reached with the notice of calls #{call.pk}" in caplog.text
    assert "given up" in caplog.text and "secret" not in caplog.text


def test_a_webhook_refusing_the_notice_is_logged_and_not_tried_again(
    mail_tool: Server, queue: Wakeups, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with WebhookReceiver(statuses=[404]) as receiver:
        settings.PATCHBAY_APPROVER_WEBHOOK = receiver.url
        call = start()
        queue.clear()

        with caplog.at_level(logging.ERROR, logger="hostapp.calls.notify"):
            notify_approvers()

        assert len(receiver.wait_for(1)) == 1
    assert f"approvers' webhook refused the notice of calls #{call.pk} (404)" in caplog.text
    assert sends_queued(queue) == []


def test_without_redis_each_call_schedules_a_send_and_they_are_still_one_message(
    hook: WebhookReceiver, queue: Wakeups, settings: Settings, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # the grouping key's Redis is down
    with django_capture_on_commit_callbacks(execute=True):
        burst = [start(), start(), start()]

    assert sends_queued(queue) == [(notify.GROUP_TASK, [])] * 3
    assert [notify_approvers() for _ in range(3)] == [3, 0, 0]
    [got] = hook.wait_for(1)
    assert [c["id"] for c in got.json["calls"]] == [c.pk for c in burst]


def test_with_the_broker_down_the_call_is_written_and_the_sweep_tells_of_it(
    hook: WebhookReceiver, settings: Settings, django_capture_on_commit_callbacks: Any
) -> None:
    with broker(f"redis://127.0.0.1:{free_port()}/0", settings), django_capture_on_commit_callbacks(execute=True):
        call = start()

    assert Call.objects.get(pk=call.pk).status == Call.WAITING
    # The sweep leaves a burst that may still be gathering ...
    assert notify_approvers(overdue=True) == 0
    # ... but not a notice older than a group's send should have been.
    ApprovalNotice.objects.update(created_at=timezone.now() - timedelta(minutes=2))
    assert notify_approvers(overdue=True) == 1
    assert [c["id"] for c in hook.wait_for(1)[0].json["calls"]] == [call.pk]


def test_notices_taken_by_a_send_are_not_taken_again_unless_its_worker_died(hook: WebhookReceiver) -> None:
    busy, lost = start(), start()
    now = timezone.now()
    ApprovalNotice.objects.filter(call=busy).update(batch="busy", taken_at=now)
    ApprovalNotice.objects.filter(call=lost).update(batch="lost", taken_at=now - timedelta(minutes=10))

    assert notify_approvers(overdue=True) == 1

    [got] = hook.wait_for(1)
    assert [c["id"] for c in got.json["calls"]] == [lost.pk]
    assert list(ApprovalNotice.objects.values_list("batch", flat=True)) == ["busy"]
