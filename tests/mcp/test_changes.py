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


def test_the_listener_hears_when_a_burst_of_events_is_over(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`listener_idle` runs after the last event of a burst, on the listener's thread, not
    after each event (the host closes its event thread's database session there)."""
    import time

    from .conftest import bundled

    DRAINED = "<no more events>"
    log: list[str] = []
    threads: set[str] = set()

    def slow_listener(event: PoolEvent) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.05)  # events arrive faster than they are handled
        log.append(f"{event.server}:{event.status.state}" if event.kind == "state" else event.kind)

    def idle() -> None:
        threads.add(threading.current_thread().name)
        log.append(DRAINED)

    pool = Pool(TEST_POLICY, listener=slow_listener, listener_idle=idle)
    try:
        pool.configure([bundled(name, tmp_path / name) for name in ("mailbox", "tasks", "calendar")])
        for name in ("mailbox", "tasks", "calendar"):
            pool.list_tools(name)
        wait_until(lambda: log and log[-1] == DRAINED, timeout=10, what="the idle call after the events")
    finally:
        pool.close()
    events = [entry for entry in log if entry != DRAINED]
    # Configuring three servers is one burst of three events: no idle call inside it.
    assert log[:3] == ["mailbox:idle", "tasks:idle", "calendar:idle"], log
    assert len(events) >= 9, log  # then connecting and ready, for each of the three
    assert log.count(DRAINED) < len(events), log
    assert len(threads) == 1, threads
