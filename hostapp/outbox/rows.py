"""Outbox actions as plain data: what `mcp outbox --json` and the JSON API show of them."""

from __future__ import annotations

from typing import Any

from .models import Action


def action_row(a: Action) -> dict[str, Any]:
    return {
        "id": a.pk,
        "call_id": a.call_id,
        "tool": a.call.tool_name,
        "status": a.status,
        "attempts": a.attempts,
        "next_attempt_at": a.next_attempt_at.isoformat() if a.status == Action.PENDING else None,
        "idempotency_key": a.idempotency_key,
        "last_error": (a.last_error or {}).get("message"),
    }
