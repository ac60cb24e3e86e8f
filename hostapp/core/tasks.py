from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from . import processes
from .models import WorkerHeartbeat


@shared_task(name="hostapp.core.tasks.heartbeat", ignore_result=True)
def heartbeat() -> None:
    """Record that a worker is alive and draining the queue."""
    hostname = heartbeat.request.hostname or "unknown"
    WorkerHeartbeat.objects.update_or_create(hostname=hostname, defaults={"seen_at": timezone.now()})


@shared_task(name="hostapp.core.tasks.forget_processes", ignore_result=True)
def forget_processes() -> int:
    """Forget the processes that died without a word (and what they reported)."""
    return processes.forget_gone()
