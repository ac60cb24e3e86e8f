"""One beat at a time: the scheduler sends due tasks only while it holds a lock in Redis.

Celery beat sends every scheduled task once per beat process, so a second beat started by
mistake (a second machine, a `docker compose up --scale beat=2`) would sweep, probe and
refresh twice. `SingleBeatScheduler` takes a lock in Redis (`redis.lock.Lock`, a key with
a time to live) before each tick and renews it; a beat that does not hold it sends
nothing and tries again a few seconds later, so when the holder dies its lock runs out
within `PATCHBAY_BEAT_LOCK_TTL` seconds and another beat takes over. A beat that stops
gives the lock back at once.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import redis
from celery.beat import PersistentScheduler
from django.conf import settings
from redis.exceptions import LockError

from .redis_client import redis_client

logger = logging.getLogger(__name__)

LOCK_KEY = "patchbay:beat:lock"


class SingleBeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler, sending only while it holds the beat lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock: Any = None
        self._holding = False
        self._waiting_said = False
        super().__init__(*args, **kwargs)

    @property
    def ttl(self) -> float:
        return float(settings.PATCHBAY_BEAT_LOCK_TTL)

    def _hold(self) -> bool:
        """Whether this beat holds the lock now (taken, or renewed for another TTL)."""
        try:
            if self._lock is None:
                self._lock = redis_client().lock(LOCK_KEY, timeout=self.ttl, thread_local=False)
            if self._holding:
                try:
                    self._lock.reacquire()
                    return True
                except LockError:  # it ran out (a pause longer than the TTL, a Redis restart)
                    self._holding = False
                    logger.warning("beat: the lock ran out; taking it again if it is free")
            # The token names the holder (who holds it: `redis-cli GET patchbay:beat:lock`).
            token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
            self._holding = bool(self._lock.acquire(blocking=False, token=token))
        except redis.RedisError as exc:  # boundary: without Redis, no beat sends (none can hold the lock)
            logger.warning("beat: the lock cannot be checked (%s); sending nothing for now", exc)
            self._holding = False
        if self._holding and self._waiting_said:
            logger.info("beat: took the lock; this beat sends the schedule now")
            self._waiting_said = False
        if not self._holding and not self._waiting_said:
            logger.info("beat: another beat holds the lock; this one waits")
            self._waiting_said = True
        return self._holding

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self._hold():
            return self.ttl / 3  # try again well before the holder's lock could run out
        # Back within a third of the lock's life, to renew it in time.
        return min(float(super().tick(*args, **kwargs)), self.ttl / 3)

    def close(self) -> None:
        if self._holding and self._lock is not None:
            try:
                self._lock.release()
            except (LockError, redis.RedisError) as exc:  # boundary: it runs out on its own
                logger.info("beat: the lock was not given back (%s); it runs out by itself", exc)
            self._holding = False
        super().close()
