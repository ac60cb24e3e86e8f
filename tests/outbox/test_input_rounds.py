"""An outbox action whose 2026-07-28 server asks for input gives its worker back while a person
answers, and is delivered again with the answers and the same idempotency key.

tests/fixtures/input_server.py answers `book` with `input_required` twice (who it is for,
then a confirmation; its `requestState` sealed by the SDK's boundary) and acts only on the
third call, writing down the key it came with. A real `celery worker` delivers; the test
SIGKILLs it while the action waits for the first answer (no lease is held then: nothing is
lost), answers, starts another worker, answers the second round. The server's own log shows
one booking, with the action's key; each request was answered once.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hostapp.calls import inputs
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.models import Server
from hostapp.catalog.pool import refresh_server
from hostapp.outbox import actions
from hostapp.outbox.models import Action
from tests.helpers import PYTHON, REPO, wait_until

from .conftest import start
from .test_crash import Worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FIXTURE = str(REPO / "tests" / "fixtures" / "input_server.py")


@pytest.fixture
def booked(tmp_path: Path) -> Iterator[Path]:
    """The fixture server in the catalog (trusted: `book` is a write, through the outbox); the
    log of what it did. Its state key is the server's own, kept across its restarts."""
    log = tmp_path / "bookings.jsonl"
    server = Server.objects.create(
        name="inp",
        command=PYTHON,
        args=[FIXTURE, "--log", str(log)],
        env={"INPUT_SERVER_KEY": secrets.token_hex(32)},
        trusted=True,
    )
    result = refresh_server(server)
    assert result.ok, result.error
    yield log


def _bookings(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _open_request(call: Call, round_: int) -> InputRequest:
    wait_until(
        lambda: InputRequest.objects.filter(call=call, round=round_, status=InputRequest.OPEN).exists(),
        timeout=60,
        what=f"round {round_} of call #{call.pk} to ask",
    )
    return InputRequest.objects.get(call=call, round=round_)


@pytest.mark.timeout(240)
def test_a_round_of_input_gives_the_worker_back_and_the_answers_are_delivered_once_with_the_same_key(
    booked: Path, tmp_path: Path
) -> None:
    call = start("inp__book", {"table": 4})
    assert call.status == Call.QUEUED
    action = Action.objects.get(call=call)
    workers = [Worker(1, tmp_path, os.environ.get("REDIS_URL"))]
    try:
        who = _open_request(call, 1)
        assert who.message == "Who is the booking for?" and who.resumes
        waiting = Action.objects.get(pk=action.pk)
        assert waiting.status == Action.INPUT and waiting.lease_until is None
        assert Call.objects.get(pk=call.pk).status == Call.INPUT

        workers[0].kill()  # while the action waits: it holds no lease, nothing is lost
        assert workers[0].proc.returncode == -signal.SIGKILL
        assert actions.sweep()["reclaimed"] == 0

        inputs.answer(who.pk, "accept", {"name": "Ada"}, name="tester")
        assert Action.objects.get(pk=action.pk).status == Action.PENDING
        assert Call.objects.get(pk=call.pk).status == Call.QUEUED
        workers.append(Worker(2, tmp_path, os.environ.get("REDIS_URL")))

        sure = _open_request(call, 2)
        assert sure.message == "Book the table for Ada?"
        assert sure.requested_schema["properties"]["confirm"]["default"] is True
        inputs.answer(sure.pk, "accept", {}, name="tester")  # the default says yes

        wait_until(
            lambda: Action.objects.get(pk=action.pk).status == Action.DONE,
            timeout=60,
            what=f"action #{action.pk} to be delivered\n{workers[-1].output()[-4000:]}",
        )
    finally:
        for worker in workers:
            worker.stop()
            for pid in worker.servers:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()

    done = Action.objects.get(pk=action.pk)
    assert _bookings(booked) == [{"key": done.idempotency_key, "table": 4, "name": "Ada"}]
    assert done.attempts == 3 and done.input_round is None
    assert [a.outcome for a in done.attempt_log.all()] == ["input", "input", "done"]
    finished = Call.objects.get(pk=call.pk)
    assert finished.status == Call.SUCCEEDED
    assert finished.result["content"][0]["text"] == "booked table 4 for Ada"
    assert [r.status for r in InputRequest.objects.filter(call=call)] == ["accept", "accept"]
    kinds = [e.kind for e in finished.events.all()]
    assert kinds == [
        "created",
        "queued",
        "input_requested",
        "input_answered",
        "input_requested",
        "input_answered",
        "succeeded",
    ]


@pytest.mark.timeout(120)
def test_a_round_nobody_answers_is_cancelled_by_the_sweeper_and_delivered_so(
    booked: Path, tmp_path: Path, settings: object
) -> None:
    settings.PATCHBAY_INPUT_WAIT = 5  # type: ignore[attr-defined]
    call = start("inp__book", {"table": 2})
    action = Action.objects.get(call=call)
    claimed = actions.claim(action.pk, "worker-1@test")
    assert claimed is not None
    assert actions.deliver_claimed([claimed], "worker-1@test") == ["input"]
    row = InputRequest.objects.get(call=call)

    InputRequest.objects.filter(pk=row.pk).update(expires_at=row.created_at)  # its time is up
    assert actions.sweep()["inputs_expired"] == 1
    assert actions.deliver(action.pk, "worker-1@test") == "done"

    finished = Call.objects.get(pk=call.pk)
    assert finished.result["content"][0]["text"] == "not booked: nobody named"
    assert InputRequest.objects.get(pk=row.pk).status == InputRequest.EXPIRED
    assert _bookings(booked) == []
