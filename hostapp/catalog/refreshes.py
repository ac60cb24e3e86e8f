"""Refreshes asked for: a server's listing queued for a worker, bursts coalesced into one.

The task that does the refresh is `hostapp.catalog.tasks.refresh_server_task`; it is queued
here by its name, so that the pool (which asks for refreshes when a server announces a
change) and the tasks (which run the pool) do not import each other.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.utils import timezone

from hostapp.core.events import send_event_on_commit
from hostapp.core.redis_client import redis_client

from .models import Server

logger = logging.getLogger(__name__)

REFRESH_TASK = "hostapp.catalog.refresh_server"


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
        current_app.send_task(REFRESH_TASK, (name,), countdown=countdown)
    except Exception as exc:  # boundary: a down broker must not fail the caller; the schedule catches up
        logger.warning("could not queue a refresh of %s (%s): %s", name, reason or "on request", exc)
        return False
    logger.info("queued a refresh of %s (%s)", name, reason or "on request")
    return True


def refresh_started(name: str) -> None:
    """The queued refresh of `name` begins: a request from now on needs a listing of its own."""
    try:
        redis_client().delete(_queued_key(name))
    except Exception as exc:  # boundary: the mark expires on its own
        logger.debug("could not clear the refresh mark of %s: %s", name, exc)


def request_refresh(names: list[str], reason: str) -> int:
    """Mark servers as being refreshed (for the page's progress) and queue the refreshes."""
    Server.objects.filter(name__in=names).update(refresh_requested_at=timezone.now())
    send_event_on_commit("server.changed", {"names": names})
    return sum(1 for name in names if queue_refresh(name, reason=reason, countdown=0))
