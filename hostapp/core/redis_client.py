"""One Redis client per URL per process (a client is a connection pool: make it once)."""

from __future__ import annotations

import threading
from typing import Any

import redis
from django.conf import settings

_clients: dict[str, Any] = {}
_lock = threading.Lock()


def redis_client() -> Any:
    """The client for settings.REDIS_URL, with short timeouts: callers treat Redis as optional."""
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        with _lock:
            client = _clients.get(url)
            if client is None:
                client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
                _clients[url] = client
    return client
