"""Broadcast small, high-level events to open pages, only after the transaction commits."""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from .consumers import LIVE_GROUP

logger = logging.getLogger(__name__)


# After a failed send, skip sending for a while: a process without Redis (a CLI run
# before `manage.py run` started the embedded one) must not pay a timeout per event.
_QUIET_AFTER_FAILURE = 10.0
_down_until = 0.0


def _send(kind: str, data: dict[str, Any]) -> None:
    global _down_until
    if time.monotonic() < _down_until:
        return
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(LIVE_GROUP, {"type": "live.event", "kind": kind, "data": data})
    except Exception as exc:  # boundary: a down Redis must not fail the change that was committed
        _down_until = time.monotonic() + _QUIET_AFTER_FAILURE
        logger.warning(
            "live events are not broadcast for %.0fs: channel layer unavailable (%s)", _QUIET_AFTER_FAILURE, exc
        )


def send_event_on_commit(kind: str, data: dict[str, Any] | None = None) -> None:
    """Queue an event for open pages; it leaves only if the surrounding transaction commits."""
    payload = dict(data or {})
    transaction.on_commit(lambda: _send(kind, payload))
