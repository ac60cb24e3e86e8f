"""Learning of tool list changes: legacy notifications and modern subscriptions/listen."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from hostapp.mcp import Pool, PoolEvent, ServerConfig
from tests.helpers import REPO, wait_until

from .conftest import TEST_POLICY, hostile


class Recorder:
    def __init__(self) -> None:
        self.events: list[PoolEvent] = []
        self.lock = threading.Lock()

    def __call__(self, event: PoolEvent) -> None:
        with self.lock:
            self.events.append(event)

    def changes(self, server: str) -> list[PoolEvent]:
        with self.lock:
            return [e for e in self.events if e.kind == "tools_changed" and e.server == server]

    def states(self, server: str) -> list[str]:
        with self.lock:
            return [e.status.state for e in self.events if e.kind == "state" and e.server == server]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def watched_pool(recorder: Recorder) -> Iterator[Pool]:
    p = Pool(TEST_POLICY, listener=recorder)
    yield p
    p.close()


def test_a_legacy_unsolicited_list_changed_reaches_the_listener(watched_pool: Pool, recorder: Recorder) -> None:
    watched_pool.configure([hostile("legacy", "well")])
    assert watched_pool.call_tool("legacy", "announce")["content"][0]["text"] == "announced"
    wait_until(lambda: recorder.changes("legacy"), timeout=5, what="a tools_changed event")


def test_a_modern_server_announces_changes_on_its_listen_stream(watched_pool: Pool, recorder: Recorder) -> None:
    config = ServerConfig(
        "changing", "stdio", command=sys.executable, args=("tests/fixtures/changing_server.py",), cwd=str(REPO)
    )
    watched_pool.configure([config])
    status = watched_pool.connect("changing")
    assert status.era == "modern"
    before = {t["name"] for t in watched_pool.list_tools("changing")}
    assert before == {"grow"}
    added = watched_pool.call_tool("changing", "grow")["structuredContent"]["result"]
    wait_until(lambda: recorder.changes("changing"), timeout=10, what="a tools_changed event from listen")
    assert {t["name"] for t in watched_pool.list_tools("changing")} == {"grow", added}


def test_state_changes_are_reported_in_order(watched_pool: Pool, recorder: Recorder) -> None:
    watched_pool.configure([hostile("legacy", "well")])
    watched_pool.connect("legacy")
    wait_until(lambda: "ready" in recorder.states("legacy"), timeout=5, what="ready")
    assert recorder.states("legacy")[:3] == ["idle", "connecting", "ready"]
