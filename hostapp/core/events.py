"""Broadcast small, high-level events to open pages, only after the transaction commits.

Sending never blocks the code that made the change: events go to a queue that one
background thread per process drains into the channel layer (Redis), in batches: what
was queued within a few tens of milliseconds leaves as one message, with one event per
changed object.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import queue
import threading
import time
from typing import Any

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.db import transaction

from .consumers import LIVE_GROUP

# Catalog and policy changes also go to this group, for listeners (the agents' endpoint)
# that need only them, not every call's update.
CATALOG_GROUP = "catalog"
CATALOG_KINDS = ("catalog.changed", "server.changed", "policy.changed")

logger = logging.getLogger(__name__)

# After a failed send, skip sending for a while: a process without Redis (a CLI run
# before `manage.py run` started the embedded one) must not pay a timeout per event.
_QUIET_AFTER_FAILURE = 10.0
_down_until = 0.0

# Events are gathered for this long after the first of a batch, then sent as one message.
BATCH_WINDOW = 0.05
BATCH_MAX = 500

_lock = threading.Lock()
# How many events were queued, and how many the sender has dealt with (sent or dropped).
_progress = threading.Condition()
_queued = 0
_handled = 0
_queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | None] = queue.SimpleQueue()
_sender: threading.Thread | None = None
_sender_pid = 0


def _collect(first: tuple[str, dict[str, Any]]) -> tuple[list[tuple[str, dict[str, Any]]], int, bool]:
    """The events queued within a short window after `first`, one per (kind, id).

    Pages re-read what changed, so only an object's latest event matters: a read-only call
    that finishes within the window is announced once, not as running and then as done.
    Returns the events in order, how many queued items they stand for, and whether the
    queue asked the sender to stop.
    """
    pending: dict[Any, tuple[str, dict[str, Any]]] = {}
    taken = 1

    def add(item: tuple[str, dict[str, Any]]) -> None:
        kind, data = item
        key: Any = (kind, data["id"]) if isinstance(data.get("id"), int | str) else object()
        pending.pop(key, None)  # the latest goes last, where it happened
        pending[key] = item

    add(first)
    deadline = time.monotonic() + BATCH_WINDOW
    while len(pending) < BATCH_MAX:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            item = _queue.get(timeout=left)
        except queue.Empty:
            break
        if item is None:
            return list(pending.values()), taken, True
        taken += 1
        add(item)
    return list(pending.values()), taken, False


def _drain() -> None:
    global _down_until
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # A layer of its own: the process's shared one belongs to the consumers' event loop.
    layer = (
        channel_layers.make_backend(DEFAULT_CHANNEL_LAYER) if DEFAULT_CHANNEL_LAYER in channel_layers.configs else None
    )
    stop = False
    while not stop:
        item = _queue.get()
        if item is None:
            break
        batch, taken, stop = _collect(item)
        try:
            if layer is not None and time.monotonic() >= _down_until:
                loop.run_until_complete(_publish(layer, batch))
        except Exception as exc:  # boundary: a down Redis must not fail the change that was committed
            _down_until = time.monotonic() + _QUIET_AFTER_FAILURE
            logger.warning(
                "live events are not broadcast for %.0fs: channel layer unavailable (%s)", _QUIET_AFTER_FAILURE, exc
            )
        finally:
            _mark_handled(taken)


def _mark_handled(count: int) -> None:
    global _handled
    with _progress:
        _handled += count
        _progress.notify_all()


def flush(timeout: float = 5.0) -> bool:
    """Wait until every event queued so far has left this process (or been dropped)."""
    with _progress:
        target = _queued
        return _progress.wait_for(lambda: _handled >= target, timeout)


async def _publish(layer: Any, batch: list[tuple[str, dict[str, Any]]]) -> None:
    """One message to the pages for the whole batch; catalog changes also to their own group."""
    events = [{"kind": kind, "data": data} for kind, data in batch]
    await layer.group_send(LIVE_GROUP, {"type": "live.events", "events": events})
    for event in events:
        if event["kind"] in CATALOG_KINDS:
            await layer.group_send(CATALOG_GROUP, {"type": "live.event", **event})


def _flush_at_exit(timeout: float = 2.0) -> None:
    """A short-lived process (a CLI command) sends what it queued before it exits."""
    thread = _sender
    if thread is None or not thread.is_alive():
        return
    _queue.put(None)
    thread.join(timeout)


def _send(kind: str, data: dict[str, Any]) -> None:
    global _sender, _sender_pid, _queued
    with _progress:
        _queued += 1
    with _lock:
        if _sender is None or _sender_pid != os.getpid() or not _sender.is_alive():
            _sender = threading.Thread(target=_drain, name="live-events", daemon=True)
            _sender_pid = os.getpid()
            _sender.start()
            atexit.register(_flush_at_exit)
    _queue.put((kind, data))


def send_event_on_commit(kind: str, data: dict[str, Any] | None = None) -> None:
    """Queue an event for open pages; it leaves only if the surrounding transaction commits."""
    payload = dict(data or {})
    transaction.on_commit(lambda: _send(kind, payload))
