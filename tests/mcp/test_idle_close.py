"""Connections a process does not use are let go (`PoolPolicy.idle_close`), and a server is
started once per process, however many threads want it at once."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Iterator

import psutil
import pytest

from hostapp.mcp import Pool

from ..helpers import process_gone, wait_until
from .conftest import TEST_POLICY, hostile

IDLE = 1.0


@pytest.fixture
def idle_pool() -> Iterator[Pool]:
    p = Pool(dataclasses.replace(TEST_POLICY, idle_close=IDLE))
    yield p
    p.close()


def _server_pid(pool: Pool, name: str) -> int:
    pid = pool.status(name).pid
    assert pid is not None
    return pid


def test_an_unused_connection_closes_and_the_next_call_opens_it_again(idle_pool: Pool) -> None:
    idle_pool.configure([hostile("well", "well")])
    assert idle_pool.call_tool("well", "echo", {"text": "one"})["content"][0]["text"] == "one"
    first = _server_pid(idle_pool, "well")

    # Nothing calls it: after IDLE seconds the server is stopped and the state says idle.
    wait_until(lambda: idle_pool.status("well").state == "idle", timeout=IDLE + 10, what="the idle close")
    wait_until(lambda: process_gone(first), timeout=10, what="the idle server to exit")
    status = idle_pool.status("well")
    assert status.pid is None and status.connected_since is None and status.last_error is None

    # The next call starts it again, as the first one did.
    assert idle_pool.call_tool("well", "echo", {"text": "two"})["content"][0]["text"] == "two"
    second = _server_pid(idle_pool, "well")
    assert second != first
    assert idle_pool.status("well").state == "ready"


def test_a_call_longer_than_the_idle_time_keeps_its_connection(idle_pool: Pool) -> None:
    idle_pool.configure([hostile("well", "well")])
    idle_pool.connect("well")
    pid = _server_pid(idle_pool, "well")
    # 2.5 s inside one call, more than twice the idle time: the call is use, whatever its length.
    result = idle_pool.call_tool("well", "slow", {"seconds": IDLE * 2.5})
    assert result["content"][0]["text"] == f"slept {IDLE * 2.5}"
    assert _server_pid(idle_pool, "well") == pid
    assert psutil.pid_exists(pid)


def test_without_idle_close_a_connection_stays(pool: Pool) -> None:
    pool.configure([hostile("well", "well")])
    pool.call_tool("well", "echo", {"text": "x"})
    pid = _server_pid(pool, "well")
    # A short look: the default keeps the connection however long it is unused.
    with pytest.raises(AssertionError):
        wait_until(lambda: pool.status("well").state != "ready", timeout=IDLE * 1.5, what="no change")
    assert _server_pid(pool, "well") == pid


def test_many_threads_at_once_start_one_server(pool: Pool) -> None:
    pool.configure([hostile("well", "well")])
    with concurrent.futures.ThreadPoolExecutor(16) as threads:
        results = list(threads.map(lambda i: pool.call_tool("well", "echo", {"text": str(i)}), range(64)))
    assert [r["content"][0]["text"] for r in results] == [str(i) for i in range(64)]
    pid = _server_pid(pool, "well")
    servers = [p for p in psutil.Process().children(recursive=True) if "hostile_server.py" in " ".join(p.cmdline())]
    assert [p.pid for p in servers] == [pid]
