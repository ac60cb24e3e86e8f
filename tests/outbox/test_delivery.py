"""One delivery attempt, `actions.deliver(id)` called as a worker would, against real servers.

Each kind of failure lands the action in the right state: done; a tool error or a JSON-RPC
error is a dead letter at once; a transient transport failure is retried with backoff until
the attempts run out; an ambiguous failure (the request may have reached the server) waits
for a person unless the server honours keys or a trusted server says the tool is idempotent.
Then the key's journey, the claim, the lease and the sweeper's re-queueing.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone
from pytest_django.fixtures import Settings

from hostapp.calls.actions import approve
from hostapp.calls.models import Call, CallEvent
from hostapp.catalog.actions import set_enabled
from hostapp.catalog.models import Server, Tool
from hostapp.catalog.pool import refresh_server
from hostapp.outbox import actions
from hostapp.outbox.models import Action, Attempt
from tests.helpers import REPO, free_port, wait_until

from .conftest import Wakeups, bundled_tasks, hostile, received, server_rows, start, stdio_server

pytestmark = pytest.mark.django_db(transaction=True)

Recorder = Callable[..., tuple[Server, Path]]


def fresh(action: Action) -> Action:
    return Action.objects.select_related("call").get(pk=action.pk)


def attempts_of(action: Action) -> list[tuple[int, str]]:
    return list(Attempt.objects.filter(action=action).values_list("number", "outcome"))


def events_of(call: Call) -> list[str]:
    return list(CallEvent.objects.filter(call=call).values_list("kind", flat=True))


# --- done ----------------------------------------------------------------------------------------


def test_a_write_is_delivered_once_with_its_key_and_the_call_succeeds(tmp_path: Path) -> None:
    bundled_tasks(tmp_path)
    call = start("tasks__add", {"title": "Renew the passport"})
    assert (call.status, call.decision) == (Call.QUEUED, Call.OUTBOX)

    assert actions.deliver(call.action.pk, "worker-1@test") == "done"

    action = fresh(call.action)
    assert (action.status, action.attempts, action.lease_until, action.last_error) == (Action.DONE, 1, None, None)
    assert action.done_at is not None
    assert attempts_of(action) == [(1, "done")]
    call = action.call
    assert (call.status, call.is_error, call.attempts) == (Call.SUCCEEDED, False, 1)
    assert call.result["structuredContent"]["title"] == "Renew the passport"
    assert events_of(call) == ["created", "queued", "succeeded"]
    # The server's own records: one task, made under the action's key.
    db = tmp_path / "tasks.sqlite3"
    assert server_rows(db, "SELECT count(*) FROM tasks WHERE title = 'Renew the passport'") == [(1,)]
    assert server_rows(db, "SELECT key, tool FROM idempotency_keys") == [(action.idempotency_key, "add")]


def test_delivering_a_done_action_again_does_nothing(tmp_path: Path) -> None:
    bundled_tasks(tmp_path)
    call = start("tasks__add", {"title": "Only once"})
    actions.deliver(call.action.pk, "worker-1@test")

    assert actions.deliver(call.action.pk, "worker-2@test") == "not-claimed"

    assert fresh(call.action).attempts == 1
    assert server_rows(tmp_path / "tasks.sqlite3", "SELECT count(*) FROM tasks WHERE title = 'Only once'") == [(1,)]


def test_an_approved_destructive_call_is_delivered_through_the_outbox(tmp_path: Path) -> None:
    stdio_server("mailbox", ["-m", "servers.mailbox", "--data-dir", str(tmp_path)], trusted=True)
    call = start("mailbox__send", {"to": "marco@example.com", "subject": "Invoice 88213", "body": "Attached."})
    assert (call.status, call.decision) == (Call.WAITING, Call.ASK)
    assert not Action.objects.filter(call=call).exists()

    call = approve(call.pk, None, approver_name="alice")

    assert actions.deliver(call.action.pk, "worker-1@test") == "done"
    rows = server_rows(tmp_path / "mailbox.sqlite3", "SELECT subject FROM messages WHERE folder = 'sent'")
    assert rows.count(("Invoice 88213",)) == 1


# --- permanent failures: dead letters at once ------------------------------------------------


def test_a_tool_error_is_a_dead_letter_at_once(recorder: Recorder) -> None:
    _, log = recorder()
    call = start("rec__fail")

    assert actions.deliver(call.action.pk, "worker-1@test") == "dead"

    action = fresh(call.action)
    assert (action.status, action.attempts) == (Action.DEAD, 1)
    assert action.last_error["kind"] == "tool"
    assert action.last_error["message"] == "the disk is full"
    assert attempts_of(action) == [(1, "dead")]
    call = action.call
    assert (call.status, call.is_error) == (Call.DEAD, True)
    assert call.result["isError"] is True  # the tool's own answer is kept
    assert call.finished_at is not None
    assert "dead_lettered" in events_of(call)
    assert len(received(log)) == 1  # and it is not sent again
    assert actions.deliver(action.pk, "worker-2@test") == "not-claimed"


def test_a_json_rpc_error_is_a_dead_letter_at_once(recorder: Recorder) -> None:
    _, log = recorder()
    call = start("rec__rpcerror")

    assert actions.deliver(call.action.pk, "worker-1@test") == "dead"

    action = fresh(call.action)
    assert action.status == Action.DEAD
    assert (action.last_error["kind"], action.last_error["code"]) == ("protocol", -32602)
    assert action.last_error["transient"] is False
    assert action.call.status == Call.DEAD
    assert len(received(log)) == 1


def test_a_tool_that_changed_since_the_call_is_not_delivered(recorder: Recorder) -> None:
    _, log = recorder()
    call = start("rec__plain", {"text": "hello"})
    Tool.objects.filter(exposed_name="rec__plain").update(definition_hash="0" * 64)

    assert actions.deliver(call.action.pk, "worker-1@test") == "dead"

    action = fresh(call.action)
    assert action.last_error["reason"] == "tool_changed"
    assert "changed its definition" in action.last_error["message"]
    assert received(log) == []


# --- transient transport failures: retried with backoff, then dead ------------------------------


def test_a_disabled_server_is_retried_later_within_the_backoff(recorder: Recorder, settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 2
    server, log = recorder()
    call = start("rec__plain", {"text": "hello"})
    set_enabled(server, False)

    before = timezone.now()
    assert actions.deliver(call.action.pk, "worker-1@test") == "retry"
    after = timezone.now()

    action = fresh(call.action)
    assert (action.status, action.attempts) == (Action.PENDING, 1)
    assert (action.last_error["kind"], action.last_error["reason"]) == ("transport", "disabled")
    # Full jitter after the first attempt: somewhere in [0, base] seconds from now.
    assert before <= action.next_attempt_at <= after + timedelta(seconds=2)
    assert action.lease_until is None
    assert attempts_of(action) == [(1, "retry")]
    assert action.call.status == Call.QUEUED
    assert events_of(action.call)[-1] == "retry_scheduled"
    assert received(log) == []


def test_a_transient_failure_is_retried_until_the_attempts_run_out_then_dead(
    recorder: Recorder, settings: Settings
) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 1
    settings.PATCHBAY_OUTBOX_BACKOFF_CAP = 2
    server, _ = recorder()
    Tool.objects.filter(exposed_name="rec__plain").update(outbox_max_attempts=3)
    call = start("rec__plain", {"text": "hello"})
    assert call.action.max_attempts == 3
    set_enabled(server, False)

    outcomes = []
    for n in (1, 2, 3):
        ceiling = min(2, 1 * 2 ** (n - 1))
        # Not due before its time: a worker woken early claims nothing.
        outcome = wait_until(
            lambda n=n: (o := actions.deliver(call.action.pk, f"worker-{n}@test")) != "not-claimed" and o,
            timeout=ceiling + 5,
            what=f"attempt {n} to be due",
        )
        outcomes.append(outcome)
        action = fresh(call.action)
        if outcome == "retry":
            delay = (action.next_attempt_at - Attempt.objects.get(action=action, number=n).finished_at).total_seconds()
            assert 0 <= delay <= min(2, 1 * 2 ** (n - 1)) + 0.001, (n, delay)

    assert outcomes == ["retry", "retry", "dead"]
    action = fresh(call.action)
    assert (action.status, action.attempts) == (Action.DEAD, 3)
    assert "gave up after 3 attempts" in action.last_error["message"]
    assert attempts_of(action) == [(1, "retry"), (2, "retry"), (3, "dead")]
    assert (action.call.status, action.call.attempts) == (Call.DEAD, 3)


def test_an_unreachable_server_is_a_transient_failure(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servers.tasks",
            "--transport",
            "http",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: proc.poll() is None and socket.create_connection(("127.0.0.1", port), timeout=1),
            timeout=60,
            what="the HTTP tasks server to listen",
        )
        server = Server.objects.create(name="web", transport="http", url=f"http://127.0.0.1:{port}/mcp", trusted=True)
        assert refresh_server(server).ok
        call = start("web__add", {"title": "Never sent"})
    finally:
        proc.kill()
        proc.wait()

    assert actions.deliver(call.action.pk, "worker-1@test") == "retry"

    action = fresh(call.action)
    assert action.status == Action.PENDING
    assert (action.last_error["kind"], action.last_error["transient"]) == ("transport", True)
    assert action.call.status == Call.QUEUED
    assert server_rows(tmp_path / "tasks.sqlite3", "SELECT count(*) FROM tasks WHERE title = 'Never sent'") == [(0,)]


# --- ambiguous failures: it may have happened ----------------------------------------------------


def test_a_crash_mid_call_on_an_untrusted_server_without_keys_waits_for_a_person() -> None:
    hostile("hs")
    call = start("hs__crash")

    assert actions.deliver(call.action.pk, "worker-1@test") == "unknown"

    action = fresh(call.action)
    assert action.status == Action.UNKNOWN
    assert (action.last_error["kind"], action.last_error["reason"]) == ("ambiguous", "crashed")
    assert attempts_of(action) == [(1, "unknown")]
    assert (action.call.status, action.call.is_error) == (Call.UNKNOWN, True)
    assert action.call.finished_at is not None
    assert events_of(action.call)[-1] == "outcome_unknown"
    assert actions.deliver(call.action.pk, "worker-2@test") == "not-claimed"


def test_a_timeout_on_an_untrusted_server_without_keys_waits_for_a_person(settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_CALL_TIMEOUT = 1
    hostile("hs")
    call = start("hs__slow", {"seconds": 4})

    assert actions.deliver(call.action.pk, "worker-1@test") == "unknown"

    action = fresh(call.action)
    assert (action.last_error["kind"], action.last_error["reason"]) == ("ambiguous", "timeout")
    assert "within 1s" in action.last_error["message"]
    assert action.call.status == Call.UNKNOWN


def test_a_server_that_honours_keys_is_retried_with_the_same_key(recorder: Recorder, settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 0
    settings.PATCHBAY_OUTBOX_CALL_TIMEOUT = 1
    server, log = recorder(keys=True)  # not trusted: the advertised keys are what counts
    assert "dev.patchbay/idempotency" in Server.objects.get(pk=server.pk).capabilities["experimental"]
    call = start("rec__slow", {"seconds": 2})

    assert actions.deliver(call.action.pk, "worker-1@test") == "retry"
    assert fresh(call.action).last_error["reason"] == "timeout"

    settings.PATCHBAY_OUTBOX_CALL_TIMEOUT = 10
    assert actions.deliver(call.action.pk, "worker-2@test") == "done"

    key = fresh(call.action).idempotency_key
    assert [c["meta"].get("dev.patchbay/idempotencyKey") for c in received(log)] == [key, key]
    assert attempts_of(call.action) == [(1, "retry"), (2, "done")]


def test_a_crash_of_a_trusted_tool_said_to_be_idempotent_is_retried(recorder: Recorder) -> None:
    recorder(trusted=True, idempotent_hints=True)
    call = start("rec__crash")

    assert actions.deliver(call.action.pk, "worker-1@test") == "retry"

    action = fresh(call.action)
    assert (action.status, action.last_error["reason"]) == (Action.PENDING, "crashed")


def test_an_idempotent_hint_from_an_untrusted_server_is_not_believed(recorder: Recorder) -> None:
    recorder(trusted=False, idempotent_hints=True)
    call = start("rec__crash")

    assert actions.deliver(call.action.pk, "worker-1@test") == "unknown"


def test_a_trusted_tool_that_is_not_idempotent_waits_for_a_person(recorder: Recorder) -> None:
    recorder(trusted=True, idempotent_hints=False)
    call = start("rec__crash")
    assert call.decision == Call.OUTBOX

    assert actions.deliver(call.action.pk, "worker-1@test") == "unknown"


def test_a_retryable_ambiguous_failure_on_the_last_attempt_is_a_dead_letter(recorder: Recorder) -> None:
    recorder(trusted=True, idempotent_hints=True)
    Tool.objects.filter(exposed_name="rec__crash").update(outbox_max_attempts=1)
    call = start("rec__crash")

    assert actions.deliver(call.action.pk, "worker-1@test") == "dead"

    action = fresh(call.action)
    assert "gave up after 1 attempts" in action.last_error["message"]
    assert action.call.status == Call.DEAD


# --- the key's journey ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "argument"), [("note", "idempotency_key"), ("note_camel", "idempotencyKey"), ("plain", None)]
)
def test_the_key_goes_in_meta_and_as_the_argument_the_schema_declares(
    recorder: Recorder, tool: str, argument: str | None
) -> None:
    _, log = recorder()
    call = start(f"rec__{tool}", {"text": "hello"})

    assert actions.deliver(call.action.pk, "worker-1@test") == "done"

    key = call.action.idempotency_key
    [got] = received(log)
    assert got["meta"]["dev.patchbay/idempotencyKey"] == key
    expected = {"text": "hello", argument: key} if argument else {"text": "hello"}
    assert got["arguments"] == expected
    # The ledger keeps what the caller asked, without the host's additions.
    assert Call.objects.get(pk=call.pk).arguments == {"text": "hello"}


def test_each_action_has_its_own_key(recorder: Recorder) -> None:
    _, log = recorder()
    calls = [start("rec__plain", {"text": "same"}) for _ in range(3)]

    for call in calls:
        actions.deliver(call.action.pk, "worker-1@test")

    keys = [c["meta"]["dev.patchbay/idempotencyKey"] for c in received(log)]
    assert keys == [c.action.idempotency_key for c in calls]
    assert len(set(keys)) == 3


def test_the_mailbox_records_the_key_sent_as_its_argument(tmp_path: Path) -> None:
    stdio_server("mailbox", ["-m", "servers.mailbox", "--data-dir", str(tmp_path)], trusted=True)
    send = Tool.objects.get(exposed_name="mailbox__send")
    assert "idempotency_key" in send.input_schema["properties"]
    call = start("mailbox__send", {"to": "lena@example.com", "subject": "Minutes", "body": "See attached."})
    call = approve(call.pk, None, approver_name="alice")

    assert actions.deliver(call.action.pk, "worker-1@test") == "done"

    db = tmp_path / "mailbox.sqlite3"
    assert server_rows(db, "SELECT key, tool FROM idempotency_keys") == [(call.action.idempotency_key, "send")]


def test_a_callers_own_key_argument_does_not_turn_a_send_into_a_dead_letter(tmp_path: Path) -> None:
    stdio_server("mailbox", ["-m", "servers.mailbox", "--data-dir", str(tmp_path)], trusted=True)
    arguments = {"to": "lena@example.com", "subject": "Agenda", "body": "Draft.", "idempotency_key": "agent-key-7"}
    call = approve(start("mailbox__send", arguments).pk, None, approver_name="alice")

    outcome = actions.deliver(call.action.pk, "worker-1@test")

    assert outcome == "done", fresh(call.action).last_error
    db = tmp_path / "mailbox.sqlite3"
    assert server_rows(db, "SELECT count(*) FROM messages WHERE subject = 'Agenda'") == [(1,)]


# --- claiming ------------------------------------------------------------------------------------


def test_only_one_of_two_claims_wins(recorder: Recorder) -> None:
    recorder()
    action = start("rec__plain", {"text": "x"}).action

    first = actions.claim(action.pk, "worker-1@test")
    second = actions.claim(action.pk, "worker-2@test")

    assert first is not None and second is None
    action = fresh(action)
    assert (action.status, action.leased_by, action.attempts) == (Action.LEASED, "worker-1@test", 1)
    assert action.lease_until is not None
    assert action.call.status == Call.RUNNING
    assert attempts_of(action) == [(1, "started")]


def test_concurrent_claims_of_the_same_actions_give_each_to_exactly_one_worker(recorder: Recorder) -> None:
    recorder()
    ids = [start("rec__plain", {"text": str(i)}).action.pk for i in range(10)]
    won: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    errors: list[BaseException] = []

    def claimer(name: str, barrier: threading.Barrier) -> None:
        try:
            for action_id in ids:
                barrier.wait(timeout=30)
                if actions.claim(action_id, f"worker-{name}@test") is not None:
                    won[name].append(action_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)
        finally:
            connection.close()

    barrier = threading.Barrier(3)
    threads = [threading.Thread(target=claimer, args=(n, barrier)) for n in won]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    assert sorted(i for claimed in won.values() for i in claimed) == sorted(ids)
    assert Attempt.objects.filter(action_id__in=ids).count() == len(ids)
    assert set(Action.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}


def test_an_action_is_not_claimed_before_it_is_due(recorder: Recorder) -> None:
    recorder()
    action = start("rec__plain", {"text": "x"}).action
    Action.objects.filter(pk=action.pk).update(next_attempt_at=timezone.now() + timedelta(minutes=5))

    assert actions.claim(action.pk, "worker-1@test") is None
    assert actions.deliver(action.pk, "worker-1@test") == "not-claimed"
    assert fresh(action).attempts == 0


# --- leases and the sweeper ----------------------------------------------------------------------


def test_an_expired_lease_of_a_retry_safe_action_goes_back_to_pending(tmp_path: Path, settings: Settings) -> None:
    bundled_tasks(tmp_path)  # advertises keys: a repeat is safe
    action = start("tasks__add", {"title": "x"}).action
    settings.PATCHBAY_OUTBOX_LEASE = 0  # the lease ends as soon as it is taken
    claimed = actions.claim(action.pk, "worker-1@test")
    assert claimed is not None

    assert actions.reclaim_expired_leases() == 1

    action = fresh(action)
    assert (action.status, action.lease_until) == (Action.PENDING, None)
    assert action.next_attempt_at <= timezone.now()
    assert (action.last_error["kind"], action.last_error["reason"]) == ("ambiguous", "lease_expired")
    assert "worker-1@test" in action.last_error["message"]
    assert attempts_of(action) == [(1, "lease_expired")]
    assert action.call.status == Call.QUEUED
    assert events_of(action.call)[-1] == "lease_expired"
    # The slow worker comes back: its verdict no longer counts.
    late = actions.record(claimed, "worker-1@test", actions.Outcome("done", result={"content": []}), 1.0)
    assert late == "lease-lost"
    assert fresh(action).status == Action.PENDING
    # And the next attempt is an ordinary one.
    assert actions.deliver(action.pk, "worker-2@test") == "done"
    assert attempts_of(action) == [(1, "lease_expired"), (2, "done")]


def test_an_expired_lease_of_an_unsafe_action_waits_for_a_person(settings: Settings) -> None:
    hostile("hs")
    action = start("hs__echo", {"text": "x"}).action
    settings.PATCHBAY_OUTBOX_LEASE = 0
    assert actions.claim(action.pk, "worker-1@test") is not None

    assert actions.reclaim_expired_leases() == 1

    action = fresh(action)
    assert action.status == Action.UNKNOWN
    assert attempts_of(action) == [(1, "unknown")]
    assert action.call.status == Call.UNKNOWN


def test_an_expired_lease_on_the_last_attempt_is_a_dead_letter(tmp_path: Path, settings: Settings) -> None:
    bundled_tasks(tmp_path)
    Tool.objects.filter(exposed_name="tasks__add").update(outbox_max_attempts=1)
    action = start("tasks__add", {"title": "x"}).action
    settings.PATCHBAY_OUTBOX_LEASE = 0
    assert actions.claim(action.pk, "worker-1@test") is not None

    assert actions.reclaim_expired_leases() == 1

    action = fresh(action)
    assert action.status == Action.DEAD
    assert action.call.status == Call.DEAD


def test_a_call_finished_by_an_expired_lease_reads_as_finished_with_an_error(
    tmp_path: Path, settings: Settings
) -> None:
    bundled_tasks(tmp_path)
    Tool.objects.filter(exposed_name="tasks__add").update(outbox_max_attempts=1)
    action = start("tasks__add", {"title": "x"}).action
    settings.PATCHBAY_OUTBOX_LEASE = 0
    actions.claim(action.pk, "worker-1@test")

    actions.reclaim_expired_leases()

    call = fresh(action).call
    assert call.status == Call.DEAD
    assert (call.is_error, call.finished_at is not None) == (True, True)


def test_a_lease_that_has_not_run_out_is_left_alone(tmp_path: Path) -> None:
    bundled_tasks(tmp_path)
    action = start("tasks__add", {"title": "x"}).action
    assert actions.claim(action.pk, "worker-1@test") is not None

    assert actions.reclaim_expired_leases() == 0
    assert fresh(action).status == Action.LEASED


def test_a_call_and_its_action_are_written_together_or_not_at_all(recorder: Recorder, wakeups: Wakeups) -> None:
    recorder()

    with pytest.raises(RuntimeError), transaction.atomic():
        start("rec__plain", {"text": "rolled back"})
        raise RuntimeError("the surrounding transaction fails")

    assert not Call.objects.filter(arguments={"text": "rolled back"}).exists()
    assert not Action.objects.exists()
    assert wakeups.deliveries() == []  # no worker is woken for a row that never existed


def test_a_call_wakes_a_worker_when_its_transaction_commits(recorder: Recorder, wakeups: Wakeups) -> None:
    recorder()

    call = start("rec__plain", {"text": "x"})

    assert wakeups.deliveries() == [call.action.pk]


def test_the_sweeper_re_queues_only_wake_ups_presumed_lost(recorder: Recorder, wakeups: Wakeups) -> None:
    recorder()
    now = timezone.now()
    stale = actions.REQUEUE_AFTER + timedelta(seconds=5)
    lost = start("rec__plain", {"text": "lost"}).action
    recent = start("rec__plain", {"text": "recent"}).action
    not_due = start("rec__plain", {"text": "later"}).action
    leased = start("rec__plain", {"text": "leased"}).action
    Action.objects.filter(pk__in=[lost.pk, not_due.pk, leased.pk]).update(queued_at=now - stale)
    Action.objects.filter(pk=not_due.pk).update(next_attempt_at=now + timedelta(minutes=5))
    actions.claim(leased.pk, "worker-1@test")
    wakeups.clear()

    assert actions.requeue_due() == 1

    assert wakeups.deliveries() == [lost.pk]
    assert fresh(lost).queued_at >= now
    assert fresh(recent).queued_at == recent.queued_at
    # Just re-queued: the next sweep leaves it alone.
    assert actions.requeue_due() == 0
    assert wakeups.deliveries() == [lost.pk]


def test_a_retry_wakes_a_worker_again_when_it_is_due(recorder: Recorder, wakeups: Wakeups, settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 60
    server, _ = recorder()
    action = start("rec__plain", {"text": "x"}).action
    set_enabled(server, False)
    wakeups.clear()

    assert actions.deliver(action.pk, "worker-1@test") == "retry"

    assert wakeups.deliveries() == [action.pk]
    [eta] = wakeups.etas()
    due = fresh(action).next_attempt_at
    assert abs((datetime.fromisoformat(eta) - due).total_seconds()) < 1


@override_settings(PATCHBAY_OUTBOX_LEASE=0)
def test_the_sweep_reports_what_it_did(tmp_path: Path) -> None:
    bundled_tasks(tmp_path)
    action = start("tasks__add", {"title": "x"}).action
    actions.claim(action.pk, "worker-1@test")

    assert actions.sweep() == {"reclaimed": 1, "requeued": 0, "expired": 0}


# --- housekeeping --------------------------------------------------------------------------------


@pytest.mark.skipif(
    "sqlite" in django_settings.DATABASES["default"]["ENGINE"],
    reason="SQLite connections are closed after each event (CONN_MAX_AGE=0); PostgreSQL ones are kept",
)
def test_closing_the_pool_leaves_no_database_session_behind(tmp_path: Path) -> None:
    import psutil

    from hostapp.catalog.pool import close_pool

    def sessions() -> set[int]:
        """Client ports of this process's other sessions on the test database."""
        mine = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.raddr}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT client_port FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return {port for (port,) in cursor.fetchall() if port in mine}

    close_pool()
    # Other tests' threads (a live server, an ASGI executor) may hold sessions of their own:
    # only what the pool opens is this test's business.
    before = sessions()
    bundled_tasks(tmp_path)  # the pool's events store the server's state from their own thread
    close_pool()

    assert sessions() - before == set()
