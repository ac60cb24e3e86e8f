from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from . import life

logger = logging.getLogger(__name__)


def prune(days: int | None = None) -> int:
    """Delete finished calls older than the retention (their done actions go with them).

    Calls whose action is a dead letter or of unknown outcome stay until a person acts.
    """
    cutoff = timezone.now() - timedelta(days=days or settings.PATCHBAY_RETENTION_DAYS)
    deleted = life.prune(cutoff, keep=Q(action__status__in=["dead", "unknown", "pending", "leased"]))
    if deleted:
        logger.info("pruned %d calls older than %s", deleted, cutoff.date())
    return deleted


@shared_task(name="hostapp.calls.prune", ignore_result=True)
def prune_task() -> int:
    return prune()
