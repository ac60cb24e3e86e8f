"""The queue drained in batches by one thread per process (hostapp/core/batching.py),
which carries the live events and the ledger rows written behind an answer."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from hostapp.core.batching import Batcher


class Recorder:
    def __init__(self, pause: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()
        self.pause = pause

    def __call__(self, batch: list[int]) -> None:
        self.threads.add(threading.current_thread().name)
        if self.pause:
            time.sleep(self.pause)
        self.batches.append(list(batch))


def test_what_is_queued_within_the_window_is_handled_as_one_batch_in_the_batchers_thread() -> None:
    seen = Recorder()
    batcher = Batcher("test-batcher", seen, window=lambda: 0.5, limit=100)
    for i in range(3):
        batcher.submit(i)
    assert batcher.flush(5)
    assert seen.batches == [[0, 1, 2]]
    assert seen.threads == {"test-batcher"}
    assert batcher.backlog == 0
    assert batcher.stop()


def test_a_batch_is_cut_at_the_limit() -> None:
    seen = Recorder()
    batcher = Batcher("test-batcher", seen, window=lambda: 0.5, limit=2)
    for i in range(5):
        batcher.submit(i)
    assert batcher.flush(5)
    assert seen.batches == [[0, 1], [2, 3], [4]]
    batcher.stop()


def test_past_the_window_the_next_item_starts_a_new_batch() -> None:
    seen = Recorder()
    batcher = Batcher("test-batcher", seen, window=lambda: 0.0, limit=100)
    batcher.submit(1)
    assert batcher.flush(5)
    batcher.submit(2)
    assert batcher.flush(5)
    assert seen.batches == [[1], [2]]
    batcher.stop()


def test_what_waits_when_the_window_closes_joins_the_batch_even_with_no_window() -> None:
    """A window of 0 waits for nothing, but takes what queued while the last batch was handled."""
    handling = threading.Event()
    release = threading.Event()
    batches: list[list[int]] = []

    def handle(batch: list[int]) -> None:
        handling.set()
        release.wait(5)
        batches.append(list(batch))

    batcher = Batcher("test-batcher", handle, window=lambda: 0.0, limit=100)
    batcher.submit(1)
    assert handling.wait(5)  # the first batch is being handled
    for i in range(2, 6):
        batcher.submit(i)
    release.set()
    assert batcher.flush(5)
    assert batches == [[1], [2, 3, 4, 5]]
    batcher.stop()


def test_the_window_is_read_for_every_batch() -> None:
    seen = Recorder()
    window = {"seconds": 0.0}
    batcher = Batcher("test-batcher", seen, window=lambda: window["seconds"], limit=100)
    batcher.submit(1)
    assert batcher.flush(5)
    window["seconds"] = 0.5
    batcher.submit(2)
    batcher.submit(3)
    assert batcher.flush(5)
    assert seen.batches == [[1], [2, 3]]
    batcher.stop()


def test_stop_hands_over_what_is_queued_and_a_later_submit_starts_again() -> None:
    seen = Recorder(pause=0.2)
    batcher = Batcher("test-batcher", seen, window=lambda: 0.0, limit=100)
    batcher.submit(1)
    time.sleep(0.05)  # the first batch is being handled
    for i in range(2, 5):
        batcher.submit(i)
    assert batcher.stop(5)
    assert [i for batch in seen.batches for i in batch] == [1, 2, 3, 4]
    assert batcher.backlog == 0

    batcher.submit(5)
    assert batcher.flush(5)
    assert seen.batches[-1] == [5]
    batcher.stop()


def test_a_stop_in_the_middle_of_a_window_still_hands_over_what_came_before_it() -> None:
    seen = Recorder()
    batcher = Batcher("test-batcher", seen, window=lambda: 30.0, limit=100)
    for i in range(3):
        batcher.submit(i)
    started = time.monotonic()
    assert batcher.stop(5)
    assert time.monotonic() - started < 5  # the stop ends the window
    assert seen.batches == [[0, 1, 2]]


def test_flush_says_when_it_ran_out_of_time() -> None:
    release = threading.Event()
    batcher = Batcher("test-batcher", lambda batch: release.wait(10), window=lambda: 0.0, limit=100)
    batcher.submit(1)
    assert not batcher.flush(0.1)
    assert batcher.backlog == 1
    release.set()
    assert batcher.flush(5)
    batcher.stop()


def test_a_handler_that_raises_is_logged_its_items_count_as_handled_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = Recorder()

    def handle(batch: list[int]) -> None:
        if batch == [13]:
            raise ValueError("unlucky")
        seen(batch)

    batcher = Batcher("test-batcher", handle, window=lambda: 0.0, limit=100)
    caplog.set_level(logging.ERROR, logger="hostapp.core.batching")
    batcher.submit(13)
    assert batcher.flush(5)
    batcher.submit(14)
    assert batcher.flush(5)
    assert seen.batches == [[14]]
    assert "test-batcher: a batch of 1 was not handled" in caplog.text
    assert "unlucky" in caplog.text
    batcher.stop()


def test_the_idle_hook_runs_once_after_a_quiet_spell_and_the_exit_hook_when_the_thread_ends() -> None:
    idle, ended = threading.Event(), threading.Event()
    calls = {"idle": 0}

    def on_idle() -> None:
        calls["idle"] += 1
        idle.set()

    batcher = Batcher(
        "test-batcher", Recorder(), window=lambda: 0.0, limit=100, idle=0.1, on_idle=on_idle, on_exit=ended.set
    )
    batcher.submit(1)
    assert idle.wait(5)
    time.sleep(0.3)
    assert calls["idle"] == 1  # once, then it waits without timing out
    assert not ended.is_set()
    assert batcher.stop(5)
    assert ended.is_set()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_empty_and_with_its_own_thread() -> None:
    release = threading.Event()
    seen = Recorder()

    def handle(batch: list[int]) -> None:
        release.wait(10)
        seen(batch)

    batcher = Batcher("test-batcher", handle, window=lambda: 0.0, limit=100)
    batcher.submit(1)  # held in the parent's thread
    batcher.submit(2)  # queued in the parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's items are not its own
        try:
            ok = batcher.backlog == 0 and batcher.flush(0)
            release.set()
            batcher.submit(3)
            ok = ok and batcher.flush(5) and seen.batches == [[3]] and batcher.backlog == 0
            os.write(write, b"ok" if ok else repr(seen.batches).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 200)
    os.close(read)
    release.set()
    assert batcher.flush(5)
    assert answer == b"ok"
    assert [i for batch in seen.batches for i in batch] == [1, 2]
    batcher.stop()


def test_a_stop_that_runs_out_of_time_strands_nothing_submitted_after_it() -> None:
    """The thread is busy past the stop's timeout: a second stop sends no second request,
    and what is submitted afterwards goes to a new thread instead of behind the request."""
    release = threading.Event()
    seen = Recorder()

    def handle(batch: list[int]) -> None:
        if batch == [1]:
            release.wait(10)
        seen(batch)

    batcher = Batcher("test-batcher", handle, window=lambda: 0.0, limit=100)
    batcher.submit(1)
    time.sleep(0.05)  # the first batch is being handled
    assert not batcher.stop(0.1)
    assert not batcher.stop(0.1)
    batcher.submit(2)
    assert batcher.flush(5) is False  # 1 is still held
    release.set()
    assert batcher.flush(5)
    assert sorted(i for batch in seen.batches for i in batch) == [1, 2]
    batcher.submit(3)
    assert batcher.flush(5)
    assert batcher.stop(5)


def test_submits_racing_a_stop_are_all_handled() -> None:
    seen = Recorder()
    batcher = Batcher("test-batcher", seen, window=lambda: 0.01, limit=100)
    stop_now = threading.Event()

    def producer(base: int) -> None:
        for i in range(200):
            batcher.submit(base + i)
            if i == 50:
                stop_now.set()

    threads = [threading.Thread(target=producer, args=(k * 1000,)) for k in range(3)]
    for t in threads:
        t.start()
    stop_now.wait(5)
    batcher.stop(5)
    for t in threads:
        t.join(10)
    assert batcher.flush(10)
    assert sorted(i for batch in seen.batches for i in batch) == sorted(
        k * 1000 + i for k in range(3) for i in range(200)
    )
    batcher.stop()
