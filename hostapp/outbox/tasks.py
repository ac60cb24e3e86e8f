"""Celery tasks of the outbox: deliver, sweep, alert. Tasks take ids and call the actions."""

from __future__ import annotations

import logging
import socket

import httpx
from celery import shared_task
from django.conf import settings

from . import actions
from .models import Action

logger = logging.getLogger(__name__)


# acks_late + reject_on_worker_lost: a worker killed mid-task gives the message back.
# The task is safe to run twice, or for nothing: only one run can claim an action.
@shared_task(name=actions.DELIVER_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver(action_id: int = 0) -> dict[str, int]:
    """A wake-up (for `action_id`, or 0: whatever is due): deliver the due actions, in batches."""
    worker = f"{deliver.request.hostname or socket.gethostname()}"
    return actions.drain(worker)


@shared_task(name="hostapp.outbox.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    done = actions.sweep()
    if any(done.values()):
        logger.info("outbox sweep: %s", done)
    return done


@shared_task(
    name=actions.ALERT_TASK,
    ignore_result=True,
    autoretry_for=(httpx.HTTPError,),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=8,
)
def send_dead_letter_alert(action_id: int) -> None:
    """POST a new dead letter's summary to PATCHBAY_ALERT_WEBHOOK (retried, never blocking deliveries)."""
    url = settings.PATCHBAY_ALERT_WEBHOOK
    if not url:
        return
    action = Action.objects.select_related("call").filter(pk=action_id).first()
    if action is None:
        return
    response = httpx.post(url, json=alert_payload(action), timeout=10.0)
    response.raise_for_status()


def alert_payload(action: Action) -> dict[str, object]:
    call = action.call
    return {
        "event": "dead_letter",
        "action_id": action.pk,
        "call_id": call.pk,
        "tool": call.tool_name,
        "server": call.server_name,
        "attempts": action.attempts,
        "idempotency_key": action.idempotency_key,
        "last_error": (action.last_error or {}).get("message"),
        "requester": call.requester_name,
    }
