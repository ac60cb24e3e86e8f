"""Structured logs: one JSON object per line (PATCHBAY_LOG_JSON=1)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Fields a log call may attach with `extra=` that belong in the object.
CONTEXT_FIELDS = ("call_id", "action_id", "idempotency_key", "server", "tool", "worker", "attempt", "agent")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
