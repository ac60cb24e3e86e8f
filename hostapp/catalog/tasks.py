"""Background work of the catalog: refreshes (on demand, on change, on schedule) and probes."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.db import connection
from django.utils import timezone

from hostapp.core.events import send_event_on_commit
from hostapp.core.redis_client import redis_client

from .models import Server
from .pool import refresh_server, sync, warm_up
from .states import record_statuses

logger = logging.getLogger(__name__)

# Scheduled refreshes of all servers are spread over this many seconds.
REFRESH_JITTER = 60.0


def _queued_key(name: str) -> str:
    return f"patchbay:refresh-queued:{name}"


def queue_refresh(name: str, reason: str = "", countdown: float = 0.5) -> bool:
    """Ask a worker to refresh `name` soon; bursts of requests coalesce into one."""
    try:
        client = redis_client()
        # One queued refresh per server is enough while it waits: the listing is complete. The
        # mark goes when the refresh starts (a request after that needs a new listing) or
        # after a few seconds (a lost message).
        if not client.set(_queued_key(name), "1", nx=True, ex=5):
            logger.info("a refresh of %s is queued already (%s)", name, reason or "on request")
            return False
        refresh_server_task.apply_async((name,), countdown=countdown)
    except Exception as exc:  # boundary: a down broker must not fail the caller; the schedule catches up
        logger.warning("could not queue a refresh of %s (%s): %s", name, reason or "on request", exc)
        return False
    logger.info("queued a refresh of %s (%s)", name, reason or "on request")
    return True


def request_refresh(names: list[str], reason: str) -> int:
    """Mark servers as being refreshed (for the page's progress) and queue the refreshes."""
    Server.objects.filter(name__in=names).update(refresh_requested_at=timezone.now())
    send_event_on_commit("server.changed", {"names": names})
    return sum(1 for name in names if queue_refresh(name, reason=reason, countdown=0))


@shared_task(name="hostapp.catalog.refresh_server", ignore_result=True)
def refresh_server_task(name: str) -> None:
    try:
        redis_client().delete(_queued_key(name))
    except Exception as exc:  # boundary: the mark expires on its own
        logger.debug("could not clear the refresh mark of %s: %s", name, exc)
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
