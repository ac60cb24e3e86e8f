"""The agents' endpoint keeps its recent SSE events, so a 2025-era agent whose stream broke
mid-call can resume it (`Last-Event-ID`, Streamable HTTP since 2025-11-25).

A 2025-era session lives in the web process that made it (its `Mcp-Session-Id` is that
process's), so the events are kept in that process's memory: the last `LIMIT` of them, none
older than `KEEP` seconds. A stream asked for after that starts again as the protocol says
(the agent is told its event is unknown). 2026-07-28 requests keep no streams to resume.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from typing import Any

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

# The endpoint's SSE `retry:` hint (milliseconds) to clients whose stream closed.
RETRY_MS = 1000
LIMIT = 2000
KEEP = 120.0


class RecentEvents(EventStore):
    """The SDK's `EventStore`, in memory, bounded by count and age."""

    def __init__(self, limit: int = LIMIT, keep: float = KEEP) -> None:
        self.limit = limit
        self.keep = keep
        self._events: OrderedDict[int, tuple[float, str, Any]] = OrderedDict()
        self._ids = itertools.count(1)

    def _forget_old(self) -> None:
        oldest = time.monotonic() - self.keep
        while self._events:
            first = next(iter(self._events.values()))
            if len(self._events) <= self.limit and first[0] >= oldest:
                return
            self._events.popitem(last=False)

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = next(self._ids)
        self._events[event_id] = (time.monotonic(), stream_id, message)
        self._forget_old()
        return str(event_id)

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        """The events of the same stream after `last_event_id`, sent again; the stream's id,
        or None when that event is unknown (never one of ours, or forgotten)."""
        self._forget_old()
        try:
            after = int(last_event_id)
        except ValueError:
            return None
        known = self._events.get(after)
        if known is None:
            return None
        stream_id = known[1]
        for event_id, (_, stream, message) in list(self._events.items()):
            if event_id > after and stream == stream_id and message is not None:  # None: a priming event
                await send_callback(EventMessage(message, str(event_id)))
        return stream_id
