"""Broadcast small, high-level events to open pages, only after the transaction commits.

Sending never blocks the code that made the change: events go to a queue that one
background thread per process drains into the channel layer (Redis).
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

# Catalog changes also go to this group, for listeners (the agents' endpoint) that need
# only them, not every call's update.
CATALOG_GROUP = "catalog"
CATALOG_KINDS = ("catalog.changed", "server.changed")

logger = logging.getLogger(__name__)

# After a failed send, skip sending for a while: a process without Redis (a CLI run
# before `manage.py run` started the embedded one) must not pay a timeout per event.
_QUIET_AFTER_FAILURE = 10.0
_down_until = 0.0

_lock = threading.Lock()
_queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | None] = queue.SimpleQueue()
_sender: threading.Thread | None = None
_sender_pid = 0


def _drain() -> None:
    global _down_until
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # A layer of its own: the process's shared one belongs to the consumers' event loop.
    layer = (
        channel_layers.make_backend(DEFAULT_CHANNEL_LAYER) if DEFAULT_CHANNEL_LAYER in channel_layers.configs else None
    )
    while True:
        item = _queue.get()
        if item is None:
            break
        kind, data = item
        if layer is None or time.monotonic() < _down_until:
            continue
        message = {"type": "live.event", "kind": kind, "data": data}
        try:
            loop.run_until_complete(layer.group_send(LIVE_GROUP, message))
            if kind in CATALOG_KINDS:
                loop.run_until_complete(layer.group_send(CATALOG_GROUP, message))
        except Exception as exc:  # boundary: a down Redis must not fail the change that was committed
            _down_until = time.monotonic() + _QUIET_AFTER_FAILURE
            logger.warning(
                "live events are not broadcast for %.0fs: channel layer unavailable (%s)", _QUIET_AFTER_FAILURE, exc
            )


def _flush_at_exit(timeout: float = 2.0) -> None:
    """A short-lived process (a CLI command) sends what it queued before it exits."""
    thread = _sender
    if thread is None or not thread.is_alive():
        return
    _queue.put(None)
    thread.join(timeout)


def _send(kind: str, data: dict[str, Any]) -> None:
    global _sender, _sender_pid
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
