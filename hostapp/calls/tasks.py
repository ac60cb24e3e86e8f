from __future__ import annotations

import logging
from datetime import timedelta

from celery import Task, shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from . import life, notify

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


# acks_late + reject_on_worker_lost: a worker killed mid-send gives the message back; a
# second run takes no notice the first one took (hostapp/calls/notify.py).
@shared_task(name=notify.GROUP_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def notify_approvers(overdue: bool = False) -> int:
    """Tell approvers of the calls that began to wait since the last send (`overdue`: the sweep)."""
    return notify.send_pending(overdue=overdue)


@shared_task(
    bind=True,
    name=notify.RETRY_TASK,
    ignore_result=True,
    autoretry_for=(notify.TryAgain,),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=notify.RETRIES,
)
def notify_again(self: Task, way: str, call_ids: list[int]) -> None:
    """One way (webhook or email) that failed for now, tried again for those calls alone."""
    notify.send_again(way, call_ids, last=self.request.retries >= notify.RETRIES)
