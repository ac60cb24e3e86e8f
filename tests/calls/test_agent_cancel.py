"""An agent that gives up on its call cancels it at the server (the agents' endpoint's
handler, called as the SDK calls it when the agent's request is cancelled).

tests/fixtures/input_server.py's `wait` (read-only) waits a minute and writes down that it
was cancelled when `notifications/cancelled` reaches it. Both ways an agent's read-only
call runs are covered: written first (the first call), and sent before its row (a call
whose tool's decision is fresh). Either way the call is on record as ended by the caller's
going away, not left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from hostapp.calls.models import Call
from hostapp.catalog.models import Server
from hostapp.catalog.pool import close_pool, refresh_server
from tests.calls.test_agent_read_lane import Agent
from tests.helpers import PYTHON, REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = str(REPO / "tests" / "fixtures" / "input_server.py")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "server.jsonl"
    server = Server.objects.create(name="inp", command=PYTHON, args=[FIXTURE, "--log", str(log)], trusted=True)
    result = refresh_server(server)
    assert result.ok, result.error
    yield log
    close_pool()


def _noted(log: Path, what: str) -> int:
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if json.loads(line).get(what) == "wait")


def _cancellations(log: Path) -> int:
    return _noted(log, "cancelled")


def _give_up(agent: Agent, log: Path) -> None:
    """The agent calls `inp__wait` and goes away once the server has it and the call is on
    record as running."""

    async def scenario() -> None:
        started = _noted(log, "started")
        task = asyncio.ensure_future(agent.acall("inp__wait", {}))

        def running() -> bool:
            on_record = Call.objects.filter(tool_name="inp__wait", status=Call.RUNNING).count() > 0
            return on_record and _noted(log, "started") > started

        await sync_to_async(wait_until, thread_sensitive=False)(running, timeout=20, what="the call to run")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # What the endpoint writes after the agent is gone runs on its loop: let it.
        await sync_to_async(wait_until, thread_sensitive=False)(
            lambda: not Call.objects.filter(tool_name="inp__wait", status=Call.RUNNING).exists(),
            timeout=20,
            what="the call to be on record as ended",
        )

    agent.loop.run_until_complete(scenario())


@pytest.mark.parametrize("warm", [False, True], ids=["written-first", "sent-before-its-row"])
def test_an_agent_that_goes_away_cancels_its_call_at_the_server(log: Path, warm: bool) -> None:
    agent = Agent("quitter")
    try:
        if warm:  # a first call reads the policy: the next one is sent before its row is written
            _give_up(agent, log)
            wait_until(lambda: _cancellations(log) == 1, timeout=20, what="the first cancellation")
            assert agent.fast("inp__wait", {})
        before = _cancellations(log)
        _give_up(agent, log)
    finally:
        agent.close()

    wait_until(lambda: _cancellations(log) == before + 1, timeout=20, what="the server to hear the cancellation")
    ended: list[Any] = list(Call.objects.filter(tool_name="inp__wait").order_by("pk"))
    last = ended[-1]
    assert last.status == Call.FAILED, last.status
    assert last.error["reason"] == "cancelled" and "went away" in last.error["message"]
