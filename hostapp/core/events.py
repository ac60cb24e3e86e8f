"""Broadcast small, high-level events to open pages, only after the transaction commits."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from .consumers import LIVE_GROUP

logger = logging.getLogger(__name__)


def _send(kind: str, data: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(LIVE_GROUP, {"type": "live.event", "kind": kind, "data": data})
    except Exception:  # boundary: a down Redis must not fail the change that was committed
        logger.warning("live event %s not broadcast (channel layer unavailable)", kind, exc_info=True)


def send_event_on_commit(kind: str, data: dict[str, Any] | None = None) -> None:
    """Queue an event for open pages; it leaves only if the surrounding transaction commits."""
    payload = dict(data or {})
    transaction.on_commit(lambda: _send(kind, payload))
