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
import threading
import time
from typing import Any

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.db import transaction

from .batching import Batcher

# Every open page listens on this group (hostapp/dashboard/consumers.py).
LIVE_GROUP = "live"
# Catalog, policy and token changes also go to this group, for listeners (the agents'
# endpoint) that need only them, not every page's update.
CATALOG_GROUP = "catalog"
CATALOG_KINDS = ("catalog.changed", "server.changed", "policy.changed", "token.changed")
# And calls' moves to this one: the agents' endpoint of every web process wakes the agents
# that wait for a call (an approval given through another process, a delivery in a worker),
# and the calls that wait for a person's input (hostapp/calls/inputs.py).
CALLS_GROUP = "calls"
CALLS_KINDS = ("call.changed", "input.changed")

logger = logging.getLogger(__name__)

# After a failed send, skip sending for a while: a process without Redis (a CLI run
# before `manage.py run` started the embedded one) must not pay a timeout per event.
_QUIET_AFTER_FAILURE = 10.0

# Events are gathered for this long after the first of a batch, then sent as one message.
BATCH_WINDOW = 0.05
BATCH_MAX = 500

Item = tuple[str, dict[str, Any]]


def latest_per_object(items: list[Item]) -> list[Item]:
    """One event per (kind, id), the latest, where it happened; events without an id all stay.

    Pages re-read what changed, so only an object's latest event matters: a read-only call
    that finishes within the window is announced once, not as running and then as done.
    """
    pending: dict[Any, Item] = {}
    for item in items:
        kind, data = item
        key: Any = (kind, data["id"]) if isinstance(data.get("id"), int | str) else object()
        pending.pop(key, None)  # the latest goes last, where it happened
        pending[key] = item
    return list(pending.values())


class _Publisher:
    """The sending thread's side: its own event loop and channel layer (the process's
    shared layer belongs to the consumers' event loop)."""

    def __init__(self) -> None:
        self._owner: tuple[int, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._layer: Any = None
        self._down_until = 0.0

    def __call__(self, items: list[Item]) -> None:
        owner = (os.getpid(), threading.get_ident())
        if self._owner != owner:
            self._owner = owner
            self._loop = asyncio.new_event_loop()
            self._layer = (
                channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
                if DEFAULT_CHANNEL_LAYER in channel_layers.configs
                else None
            )
        if self._layer is None or time.monotonic() < self._down_until:
            return
        assert self._loop is not None
        try:
            self._loop.run_until_complete(_publish(self._layer, latest_per_object(items)))
        except Exception as exc:  # boundary: a down Redis must not fail the change that was committed
            self._down_until = time.monotonic() + _QUIET_AFTER_FAILURE
            logger.warning(
                "live events are not broadcast for %.0fs: channel layer unavailable (%s)", _QUIET_AFTER_FAILURE, exc
            )


async def _publish(layer: Any, batch: list[Item]) -> None:
    """One message to the pages for the whole batch; its catalog changes, and its calls'
    moves, in one more each to their own group (a hundred servers connecting at once are one
    message, not a hundred)."""
    events = [{"kind": kind, "data": data} for kind, data in batch]
    await layer.group_send(LIVE_GROUP, {"type": "live.events", "events": events})
    for group, kinds in ((CATALOG_GROUP, CATALOG_KINDS), (CALLS_GROUP, CALLS_KINDS)):
        chosen = [event for event in events if event["kind"] in kinds]
        if chosen:
            await layer.group_send(group, {"type": "live.events", "events": chosen})


_sender: Batcher[Item] = Batcher("live-events", _Publisher(), window=lambda: BATCH_WINDOW, limit=BATCH_MAX)
# A short-lived process (a CLI command) sends what it queued before it exits.
atexit.register(_sender.stop, 2.0)


def flush(timeout: float = 5.0) -> bool:
    """Wait until every event queued so far has left this process (or been dropped)."""
    return _sender.flush(timeout)


def _send(kind: str, data: dict[str, Any]) -> None:
    _sender.submit((kind, data))


def send_event(kind: str, data: dict[str, Any] | None = None) -> None:
    """Queue an event that stands for no change of the database (a call's progress, a
    server's log line), from any thread: it leaves at once, batched as the others."""
    _send(kind, dict(data or {}))


def send_event_on_commit(kind: str, data: dict[str, Any] | None = None) -> None:
    """Queue an event for open pages; it leaves only if the surrounding transaction commits."""
    payload = dict(data or {})
    transaction.on_commit(lambda: _send(kind, payload))
