"""Resource subscriptions through the host: who hears that a server's resource changed.

An agent subscribes to a resource by the URI it was given (agent_offers.py maps it to its
server and the server's own URI). The host subscribes to each resource of a server once,
on this process's pool, however many agents want it, and lets go when the last one does.
An update the server announces reaches each subscriber under the URI it subscribed with:

* a 2025-era session (`resources/subscribe`) as `notifications/resources/updated` on its
  long-lived connection, until it unsubscribes or its session is gone;
* a 2026-07-28 listen stream that named the resource (`subscriptions/listen` with
  `resourceSubscriptions`) as an event on that stream, for as long as the stream is open.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from mcp.shared.subscriptions import ResourceUpdated

from hostapp.mcp import Pool

from .notices import AgentBus

logger = logging.getLogger(__name__)

# Subscriptions kept at most, over every agent (the oldest is dropped past it).
MAX_SUBSCRIPTIONS = 10000


@dataclass(frozen=True)
class Subscriber:
    agent: int
    uri: str  # as the agent named it
    session: Any = None  # a 2025-era session; None for a listen stream


class Updates:
    def __init__(self, bus: AgentBus) -> None:
        self.bus = bus
        # By (server, the server's URI): each subscriber by its key (a session id, or a
        # listen stream's own key).
        self._by_resource: dict[tuple[str, str], dict[object, Subscriber]] = {}
        self._pools: dict[tuple[str, str], Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Future[Any]] = set()

    def count(self) -> int:
        return sum(len(s) for s in self._by_resource.values())

    async def add(self, pool: Pool, server: str, uri: str, key: object, subscriber: Subscriber) -> None:
        """`subscriber` hears of updates to `uri` of `server` (the server's own URI)."""
        self._loop = asyncio.get_running_loop()
        resource = (server, uri)
        subscribers = self._by_resource.setdefault(resource, {})
        first = not subscribers
        subscribers[key] = subscriber
        if first:
            self._pools[resource] = pool
            await pool.asubscribe(server, uri, self._heard(server))
        while self.count() > MAX_SUBSCRIPTIONS:
            oldest = next(iter(self._by_resource))
            for old in list(self._by_resource[oldest]):
                await self.remove(oldest[0], oldest[1], old)

    async def remove(self, server: str, uri: str, key: object) -> None:
        resource = (server, uri)
        subscribers = self._by_resource.get(resource)
        if subscribers is None or subscribers.pop(key, None) is None:
            return
        if not subscribers:
            del self._by_resource[resource]
            pool = self._pools.pop(resource, None)
            if pool is not None and not pool.closed:
                await pool.aunsubscribe(server, uri)

    def _heard(self, server: str) -> Any:
        """The pool's callback (on its own loop): the telling is done on this one."""
        loop = self._loop
        assert loop is not None

        def heard(uri: str) -> None:
            loop.call_soon_threadsafe(self._tell_soon, server, uri)

        return heard

    def _tell_soon(self, server: str, uri: str) -> None:
        task = asyncio.ensure_future(self.tell(server, uri))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def tell(self, server: str, uri: str) -> None:
        """`uri` of `server` changed: tell each of its subscribers."""
        for key, subscriber in list(self._by_resource.get((server, uri), {}).items()):
            if subscriber.session is None:
                await self.bus.publish_to({subscriber.agent}, ResourceUpdated(uri=subscriber.uri))
                continue
            try:
                await subscriber.session.send_resource_updated(subscriber.uri)
            except Exception:  # boundary: a gone session stops hearing
                logger.debug("a session subscribed to %s is gone", subscriber.uri, exc_info=True)
                await self.remove(server, uri, key)
