"""Background work of the catalog: refreshes (on demand, on change, on schedule) and probes."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.db import connection

from .models import Server
from .pool import refresh_server, sync, warm_up
from .refreshes import REFRESH_TASK, refresh_started
from .states import record_statuses

logger = logging.getLogger(__name__)

# Scheduled refreshes of all servers are spread over this many seconds.
REFRESH_JITTER = 60.0


@shared_task(name=REFRESH_TASK, ignore_result=True)
def refresh_server_task(name: str) -> None:
    refresh_started(name)
    server = Server.objects.filter(name=name).first()
    if server is None or not server.enabled:
        return
    result = refresh_server(server)
    if not result.ok:
        logger.warning("refresh of %s failed: %s", name, result.error)


@shared_task(name="hostapp.catalog.refresh_all", ignore_result=True)
def refresh_all() -> None:
    for name in Server.objects.filter(enabled=True).values_list("name", flat=True):
        refresh_server_task.apply_async((name,), countdown=random.uniform(0, REFRESH_JITTER))


@shared_task(name="hostapp.catalog.probe_all", ignore_result=True)
def probe_all() -> None:
    """An MCP-level health probe of every enabled server, from this worker's pool."""
    servers = list(Server.objects.all())
    pool = sync(servers)
    for server in servers:
        if server.enabled:  # stored as each probe ends: a slow one does not hold up the others
            record_statuses([pool.probe(server.name)])


def _warm_up() -> None:
    try:
        statuses = warm_up()
    except Exception:  # boundary: a server that does not start is recorded by the pool; this is a head start
        logger.exception("connecting to the servers as the worker started failed")
        return
    finally:
        connection.close()  # this thread's own session ends with it
    logger.info(
        "connected as the worker started: %s", ", ".join(f"{s.name} {s.state}" for s in statuses) or "no servers"
    )


@worker_ready.connect
def _warm_up_as_the_worker_starts(**kwargs: Any) -> None:
    """A worker may deliver to any server: it connects to each as it starts, in the
    background, so that its first delivery does not wait for a server to start."""
    threading.Thread(target=_warm_up, name="catalog-warm-up", daemon=True).start()
