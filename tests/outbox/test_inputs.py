"""An outbox delivery whose server asks a person for input (hostapp/calls/inputs.py).

server-everything (npm, stdio, trusted) lists `trigger-elicitation-request` as a write tool:
its calls go through the outbox. The worker's step (`deliver`, in a thread as a worker thread
runs it) waits while a person answers, keeping the action's lease past the sweeper's reach,
and records what the server made of the answer, once, with the action's key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from hostapp.calls import inputs
from hostapp.calls.actions import Requester, start_call
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.models import Server
from hostapp.catalog.pool import close_pool, refresh_server
from hostapp.outbox import actions
from hostapp.outbox.models import Action
from tests.helpers import wait_until
from tests.mcp.test_interop import EVERYTHING, NODE, _need_node

TOOL = "everything__trigger-elicitation-request"


@pytest.fixture
def everything(transactional_db: None) -> Iterator[Server]:
    _need_node()
    server = Server.objects.create(name="everything", command=str(NODE), args=[str(EVERYTHING)], trusted=True)
    result = refresh_server(server)
    assert result.ok, result.error
    yield server
    close_pool()


def _deliver_in_a_thread(action: Action) -> tuple[threading.Thread, list[str]]:
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(actions.deliver(action.pk, "worker-1@test")))
    worker.start()
    return worker, outcome


def test_a_delivery_waits_for_a_persons_answer_keeping_its_lease(everything: Server, settings: Any) -> None:
    settings.PATCHBAY_OUTBOX_LEASE = 5
    call = start_call(TOOL, {}, Requester(Call.CLI, "cli"))
    assert call.status == Call.QUEUED
    action = Action.objects.get(call=call)

    worker, outcome = _deliver_in_a_thread(action)
    wait_until(lambda: InputRequest.objects.filter(call=call).exists(), timeout=30, what="the server to ask")
    asked = InputRequest.objects.get(call=call)
    assert Call.objects.get(pk=call.pk).status == Call.INPUT
    leased = Action.objects.get(pk=action.pk)
    assert leased.status == Action.LEASED
    # Held until the request expires, and a lease more: the sweeper leaves it alone.
    assert leased.lease_until >= asked.expires_at
    assert actions.reclaim_expired_leases() == 0

    inputs.answer(asked.pk, "accept", {"name": "Grace Hopper"}, name="cli")
    worker.join(timeout=30)

    assert outcome == ["done"]
    done = Action.objects.get(pk=action.pk)
    assert done.status == Action.DONE and done.attempts == 1
    finished = Call.objects.get(pk=call.pk)
    assert finished.status == Call.SUCCEEDED
    assert "- Name: Grace Hopper" in finished.result["content"][1]["text"]
    kinds = [e.kind for e in finished.events.all()]
    assert kinds == ["created", "queued", "input_requested", "input_answered", "succeeded"]


def test_a_delivery_nobody_answers_ends_as_the_server_says_when_the_wait_is_over(
    everything: Server, settings: Any
) -> None:
    settings.PATCHBAY_INPUT_WAIT = 1
    call = start_call(TOOL, {}, Requester(Call.CLI, "cli"))
    worker, outcome = _deliver_in_a_thread(Action.objects.get(call=call))
    worker.join(timeout=60)

    assert outcome == ["done"]
    finished = Call.objects.get(pk=call.pk)
    assert "User cancelled" in finished.result["content"][0]["text"]
    row = InputRequest.objects.get(call=call)
    assert row.status == InputRequest.EXPIRED and row.answered_at is not None
    assert row.answered_at >= row.expires_at - timedelta(seconds=1)
