"""This process's client pool, configured from the Server table.

One pool per process (web, worker, a management command), created on first use and closed
at exit, so stdio servers it started are stopped in protocol order. A server edited in
another process is noticed by its `config_changed_at` the next time it is used here.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connection

from hostapp.mcp import Pool, PoolEvent, ServerConfig, ServerStatus

from .models import Server

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: Pool | None = None
_versions: dict[str, datetime] = {}


def _prefer_our_python() -> None:
    """`python` in a server's command means this installation's Python (the venv's), as
    it does under `manage.py run`, whether or not the venv is activated."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + os.pathsep + path


def get_pool() -> Pool:
    global _pool
    with _lock:
        if _pool is None:
            _prefer_our_python()
            from hostapp.oauth.store import auth_for

            _pool = Pool(listener=_on_event, auth_factory=auth_for, listener_idle=_events_idle)
            atexit.register(close_pool)
        return _pool


def runtime_config(server: Server) -> ServerConfig:
    """The server's configuration as this host runs it: a stdio server without a working
    directory starts in the project directory (where `servers/` is)."""
    config = server.to_config()
    if config.transport == "stdio" and not config.cwd:
        config = dataclasses.replace(config, cwd=str(settings.BASE_DIR))
    return config


def close_pool() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
        _versions.clear()
    if pool is not None:
        pool.close()


def pool_for(server: Server) -> Pool:
    """The pool, with this server's current configuration in it."""
    pool = get_pool()
    if _versions.get(server.name) != server.config_changed_at:
        if server.get_deferred_fields():  # a row read for a call carries only what the call needs
            server = Server.objects.get(pk=server.pk)
        pool.upsert(runtime_config(server))
        _versions[server.name] = server.config_changed_at
    return pool


def current_pool(server: Server) -> Pool | None:
    """The pool if it already runs this server's configuration (no database, no lock wait)."""
    pool = _pool
    if pool is not None and not pool.closed and _versions.get(server.name) == server.config_changed_at:
        return pool
    return None


def sync(servers: Iterable[Server]) -> Pool:
    """Make the pool serve exactly these servers."""
    pool = get_pool()
    servers = list(servers)
    wanted = {s.name for s in servers}
    for name in [n for n in pool.names() if n not in wanted]:
        pool.remove(name)
        _versions.pop(name, None)
    for server in servers:
        pool_for(server)
    return pool


# The states the pool reported and this process has yet to store, the latest per server.
# Stored when a burst of events is over (many servers connecting at once are one
# transaction, and a "connecting" that "ready" followed is not written), or sooner when
# events keep coming. Under a lock: a pool being closed may still be delivering its last
# events while a new one delivers its first.
_states: dict[str, ServerStatus] = {}
_states_lock = threading.Lock()
_states_since = 0.0
STATES_HELD_MAX = 0.5  # seconds
STATES_HELD_COUNT = 200


def _on_event(event: PoolEvent) -> None:
    """Runs on the pool's event thread: note the state, react to announced changes."""
    global _states_since
    from . import tasks

    if event.kind == "state":
        with _states_lock:
            if not _states:
                _states_since = time.monotonic()
            _states.pop(event.server, None)  # in the order they last changed
            _states[event.server] = event.status
            due = len(_states) >= STATES_HELD_COUNT or time.monotonic() - _states_since > STATES_HELD_MAX
        if due:
            _store_states()
    elif event.kind == "tools_changed":
        try:
            tasks.queue_refresh(event.server, reason="the server announced a change")
        except Exception:
            connection.close()  # the next event starts from a fresh session
            raise


def _store_states() -> None:
    from . import actions

    with _states_lock:
        statuses = list(_states.values())
        _states.clear()
    if not statuses:
        return
    try:
        actions.record_statuses(statuses)
    except Exception:
        connection.close()  # the next event starts from a fresh session
        raise


def _events_idle() -> None:
    """No more pool events wait: store the states held, and do not keep a database session
    open between bursts (the event thread's)."""
    try:
        _store_states()
    finally:
        connection.close()
