"""A queue that one background thread per process drains in batches.

Used where the code that produces something must not wait for it to leave: live events
for the pages (`hostapp.core.events`) and the states a client pool reports
(`hostapp.catalog.pool`). Items are queued from any thread; the thread takes the first
item, gathers what arrives within a short window after it (up to a limit), and hands the
batch to one function. Counting what was queued against what was handled lets callers
wait for everything queued so far (`flush`), and a stop hands over what is queued before
the thread ends. A forked child starts empty: what its parent queued is the parent's.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import connection

T = TypeVar("T")

logger = logging.getLogger(__name__)

_STOP = object()


class Batcher(Generic[T]):
    """Items queued from any thread, handed to `handle` in batches by one thread.

    - `window()`: how long (seconds) to gather after a batch's first item; read per batch,
      so a setting can change it. What is queued when it closes joins the batch too.
    - `limit`: the most items in one batch.
    - `idle` and `on_idle`: after `idle` seconds without an item, `on_idle` runs once (in
      the thread) before it waits on.
    - `on_exit`: runs in the thread when it ends.

    `handle` runs in the thread; whatever it raises is logged, and its items count as
    handled all the same (retrying is the handler's own business).
    """

    def __init__(
        self,
        name: str,
        handle: Callable[[list[T]], None],
        *,
        window: Callable[[], float],
        limit: int,
        idle: float | None = None,
        on_idle: Callable[[], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._handle = handle
        self._window = window
        self._limit = limit
        self._idle = idle
        self._on_idle = on_idle
        self._on_exit = on_exit
        self._reset()
        # A forked child starts empty, with locks of its own (the parent's may have been
        # held by another thread at the fork). Weakly: a batcher is not kept alive for it.
        ref = weakref.ref(self)

        def reset_in_child() -> None:
            batcher = ref()
            if batcher is not None:
                batcher._reset()

        os.register_at_fork(after_in_child=reset_in_child)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._progress = threading.Condition()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._queued = 0
        self._handled = 0
        self._thread: threading.Thread | None = None
        self._stop_sent = False  # the current thread was asked to stop

    # -- producers ------------------------------------------------------------------------

    def submit(self, item: T) -> None:
        # Under the lock: an item never lands behind a stop request (a stop holds the lock
        # until its thread has ended), and a stopped thread is replaced before it is queued.
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._stop_sent:
                self._start()
            with self._progress:
                self._queued += 1
            self._queue.put(item)

    def _start(self) -> None:
        if self._stop_sent:
            # The last thread was asked to stop and has not yet: it keeps the old queue (and
            # its stop request) to itself; what comes now goes to a new queue and thread.
            self._queue = queue.SimpleQueue()
        self._stop_sent = False
        self._thread = threading.Thread(target=self._run, args=(self._queue,), name=self.name, daemon=True)
        self._thread.start()

    @property
    def backlog(self) -> int:
        """Items queued and not handled yet."""
        return self._queued - self._handled

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every item queued so far has been handled; whether it was in time."""
        with self._progress:
            target = self._queued
            return self._progress.wait_for(lambda: self._handled >= target, timeout)

    def stop(self, timeout: float = 5.0) -> bool:
        """Hand over what is queued, then end the thread; whether it ended in time.
        A later `submit` starts a new thread."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return True
            if not self._stop_sent:
                self._stop_sent = True
                self._queue.put(_STOP)
            thread.join(timeout)
            return not thread.is_alive()

    # -- the thread -----------------------------------------------------------------------

    def _run(self, items: queue.SimpleQueue[object]) -> None:
        try:
            stop = False
            while not stop:
                item = self._next(items)
                if item is _STOP:
                    break
                batch, stop = self._collect(items, item)  # type: ignore[arg-type]
                try:
                    self._handle(batch)
                except Exception:  # boundary: one bad batch must not end the thread
                    logger.exception("%s: a batch of %d was not handled", self.name, len(batch))
                finally:
                    with self._progress:
                        self._handled += len(batch)
                        self._progress.notify_all()
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _next(self, items: queue.SimpleQueue[object]) -> object:
        if self._idle is None:
            return items.get()
        try:
            return items.get(timeout=self._idle)
        except queue.Empty:
            if self._on_idle is not None:
                self._on_idle()
            return items.get()

    def _collect(self, items: queue.SimpleQueue[object], first: T) -> tuple[list[T], bool]:
        """`first`, what arrives within the window after it and what is queued already when
        the window closes (a window of 0 takes what waits, and waits for nothing); whether
        a stop came too."""
        batch = [first]
        deadline = time.monotonic() + self._window()
        while len(batch) < self._limit:
            left = deadline - time.monotonic()
            try:
                item = items.get(timeout=left) if left > 0 else items.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)  # type: ignore[arg-type]
        return batch, False


def with_session(
    name: str,
    handle: Callable[[list[T]], None],
    *,
    window: Callable[[], float],
    limit: int,
    idle: float,
) -> Batcher[T]:
    """A batcher whose thread keeps its database session between batches (opening one costs
    more than most batches) and closes it when idle for `idle` seconds, when it ends, and
    after a batch that raised (the next one starts from a fresh session)."""

    def close() -> None:
        connection.close()  # the calling thread's: `connection` is looked up per thread

    def run(batch: list[T]) -> None:
        try:
            handle(batch)
        except Exception:
            close()
            raise

    return Batcher(name, run, window=window, limit=limit, idle=idle, on_idle=close, on_exit=close)
