"""This process's client pool, configured from the Server table, and what it does.

One pool per process (web, worker, a management command), created on first use and closed
at exit, so stdio servers it started are stopped in protocol order. A server edited in
another process is noticed by its `config_changed_at` the next time it is used here. What
the pool sees of each server is stored as this process's own (hostapp/catalog/states.py);
refreshing a server's tools lists them through it (`refresh_server`).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings

# Imported first so that its exit handler, registered on import, runs after `close_pool`
# (registered with the first pool), which stores the last states: their live events leave.
from hostapp.core import events as _live_events  # noqa: F401
from hostapp.core import identity, processes
from hostapp.core.batching import Batcher, with_session
from hostapp.mcp import McpFailure, Pool, PoolEvent, PoolPolicy, ServerConfig, ServerStatus
from hostapp.oauth.store import auth_for

from .actions import RefreshResult, mark_refresh_failed, record_tools
from .models import Server
from .offers import record_offers
from .refreshes import queue_refresh
from .states import forget_server, record_statuses

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


def _policy() -> PoolPolicy:
    """A web process lets go of connections it has not used for PATCHBAY_IDLE_CLOSE seconds:
    it needs a server only while people or agents call it. A worker keeps them (it probes)."""
    idle = settings.PATCHBAY_IDLE_CLOSE
    return PoolPolicy(idle_close=float(idle) if idle and identity.role() == identity.WEB else None)


def get_pool() -> Pool:
    global _pool
    with _lock:
        if _pool is None:
            _prefer_our_python()
            _pool = Pool(policy=_policy(), listener=_on_event, auth_factory=auth_for)
            atexit.register(close_pool)
        return _pool


def _forget_pool_after_fork() -> None:
    """A forked child (a prefork Celery pool's, say) starts without a pool: the parent's
    runs on a thread the child does not have, and its connections and servers are the
    parent's to close. The child's first use starts its own."""
    global _lock, _pool, _versions
    _lock = threading.Lock()
    _pool = None
    _versions = {}


os.register_at_fork(after_in_child=_forget_pool_after_fork)


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
    # Its last events stored, the handler ends (and with it its database session).
    events.stop(5.0)
    # Without a pool this process holds no connection: what it reported goes, with its row.
    processes.unregister()


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


async def apool_for(server: Server) -> Pool:
    """:func:`pool_for` for async callers: at once when the pool already runs this server's
    configuration (`current_pool`), else read and configured on a thread."""
    return current_pool(server) or await sync_to_async(pool_for, thread_sensitive=False)(server)


def sync(servers: Iterable[Server]) -> Pool:
    """Make the pool serve exactly these servers."""
    pool = get_pool()
    servers = list(servers)
    wanted = {s.name for s in servers}
    for name in [n for n in pool.names() if n not in wanted]:
        pool.remove(name)
        _versions.pop(name, None)
        forget_server(name)
    for server in servers:
        pool_for(server)
    return pool


# What the pool reports is handled on a thread of its own, in batches: what arrives within
# WINDOW seconds of a batch's first event, and what waits when the thread gets to it. The
# states of a batch are stored in one transaction, the latest per server: many servers
# connecting at once are a few transactions, and a state another followed within the window
# (a new slot's "idle" before its "connecting", a quick "connecting" before its "ready") is
# not written, nor sent to the pages. The window is short next to what the pages and the
# outbox do with these states. The thread keeps its database session until idle for
# IDLE_CLOSE seconds.
WINDOW = 0.05
IDLE_CLOSE = 2.0


def _handle_events(batch: list[PoolEvent]) -> None:
    latest: dict[str, ServerStatus] = {}
    for event in batch:
        if event.kind == "state":
            latest.pop(event.server, None)  # in the order they last changed
            latest[event.server] = event.status
        elif event.kind == "tools_changed":
            queue_refresh(event.server, reason="the server announced a change")
    if latest:
        record_statuses(list(latest.values()))


events: Batcher[PoolEvent] = with_session(
    "catalog-pool-events", _handle_events, window=lambda: WINDOW, limit=1000, idle=IDLE_CLOSE
)


def _on_event(event: PoolEvent) -> None:
    """Runs on the pool's event thread: handed over, never waited for."""
    events.submit(event)


def warm_up() -> list[ServerStatus]:
    """Connect to every enabled server now, all at once (a worker, as it starts): the first
    delivery a worker takes then does not wait for its server to start."""
    servers = list(Server.objects.filter(enabled=True))
    if not servers:
        return []
    pool = sync(servers)
    limit = max(runtime_config(s).connect_timeout for s in servers) + 5

    async def connect_all() -> list[ServerStatus]:
        return list(await asyncio.gather(*(pool.aconnect(s.name) for s in servers)))

    return pool.run(connect_all(), timeout=limit)


def refresh_server(server: Server) -> RefreshResult:
    """List the server's tools through this process's pool and merge them into the catalog."""
    if not server.enabled:
        return RefreshResult(server.name, ok=False, tools=server.tools.count(), error="the server is disabled")
    pool = pool_for(server)
    try:
        definitions = pool.list_tools(server.name)
    except McpFailure as failure:
        logger.warning("refresh of %s failed: %s", server.name, failure)
        return mark_refresh_failed(server, failure)
    result = record_tools(server, definitions)
    # Its prompts, templates and resources: a failure to list them keeps the ones listed
    # before, and the tools' refresh stands.
    try:
        offers = record_offers(server, pool.list_offered(server.name))
    except McpFailure as failure:
        logger.warning("%s: its prompts and resources could not be listed: %s", server.name, failure)
        result.offers_error = str(failure)
    else:
        result.prompts, result.resources = offers.prompts, offers.resources + offers.templates
        result.offers_quarantined = offers.quarantined
    return result
