"""Structured logs: one JSON object per line (PATCHBAY_LOG_JSON=1); routine tasks kept quiet."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
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


class QuietRoutine(logging.Filter):
    """Drops Celery's lines about routine tasks (the sweeper, heartbeats, probes) that did
    nothing: beat sending them, a worker receiving them, and their success when it returned
    nothing or only zeros. A routine task that did something, failed or was retried is
    logged as any other; warnings and errors always are."""

    LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")

    def __init__(self, tasks: Iterable[str] = ()) -> None:
        super().__init__()
        self.tasks = frozenset(tasks)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or record.name not in self.LOGGERS or not self.tasks:
            return True
        args = record.args
        if isinstance(args, Mapping):  # the worker's lines: name, id, return_value, ...
            if args.get("name") not in self.tasks:
                return True
            if "return_value" not in args:
                return not str(record.msg).endswith("received")
            return not _nothing(args["return_value"])
        if isinstance(args, tuple) and len(args) == 2 and "Sending due task" in str(record.msg):
            return args[1] not in self.tasks  # beat: (entry, task name)
        return True


def _nothing(value: Any) -> bool:
    """None, or a count of things done that is all zeros (as a repr or a dict)."""
    if value is None or str(value) in ("None", "0", "[]", "{}", "()"):
        return True
    if isinstance(value, Mapping):
        return not any(value.values())
    text = str(value)
    return text.startswith("{") and all(part.strip().endswith(": 0") for part in text.strip("{}").split(",") if part)
