"""Routine tasks that did nothing leave no line in the log; everything else does. The records
are made with Celery's own messages, as its beat and worker write them."""

from __future__ import annotations

import logging

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_RETRY, LOG_SUCCESS
from django.conf import settings

from hostapp.core.logs import QuietRoutine

QUIET = QuietRoutine(settings.ROUTINE_TASKS)


def record(logger: str, msg: str, args: object, level: int = logging.INFO) -> logging.LogRecord:
    made = logging.LogRecord(logger, level, __file__, 1, msg, None, None)
    made.args = args  # type: ignore[assignment]  # Celery passes a mapping, as logging allows
    return made


def worker(msg: str, name: str, **fields: object) -> logging.LogRecord:
    logger = "celery.worker.strategy" if msg == LOG_RECEIVED else "celery.app.trace"
    return record(logger, msg, {"name": name, "id": "abc", **fields})


def beat(entry: str, task: str) -> logging.LogRecord:
    return record("celery.beat", "Scheduler: Sending due task %s (%s)", (entry, task))


@pytest.mark.parametrize(
    ("made", "kept"),
    [
        (beat("outbox-sweep", "hostapp.outbox.sweep"), False),
        (worker(LOG_RECEIVED, "hostapp.outbox.sweep"), False),
        (
            worker(LOG_SUCCESS, "hostapp.outbox.sweep", runtime=0.01, return_value="{'reclaimed': 0, 'requeued': 0}"),
            False,
        ),
        (worker(LOG_SUCCESS, "hostapp.core.tasks.heartbeat", runtime=0.01, return_value="None"), False),
        (worker(LOG_SUCCESS, "hostapp.core.tasks.forget_processes", runtime=0.01, return_value="0"), False),
        # A sweep that did something is worth its line; so is any other task, and any retry.
        (
            worker(LOG_SUCCESS, "hostapp.outbox.sweep", runtime=0.01, return_value="{'reclaimed': 2, 'requeued': 0}"),
            True,
        ),
        (worker(LOG_SUCCESS, "hostapp.core.tasks.forget_processes", runtime=0.01, return_value="3"), True),
        (worker(LOG_RECEIVED, "hostapp.outbox.deliver"), True),
        (beat("refresh-catalog", "hostapp.catalog.refresh_all"), True),
        (worker(LOG_RETRY, "hostapp.outbox.sweep", exc="boom"), True),
    ],
)
def test_what_the_log_keeps(made: logging.LogRecord, kept: bool) -> None:
    assert QUIET.filter(made) is kept
    made.getMessage()  # the record is one Celery could have written


def test_warnings_and_errors_of_routine_tasks_are_always_kept() -> None:
    failed = worker(LOG_SUCCESS, "hostapp.outbox.sweep", runtime=0.01, return_value="None")
    failed.levelno = logging.ERROR
    assert QUIET.filter(failed) is True


def test_the_console_handler_uses_it() -> None:
    handler = settings.LOGGING["handlers"]["console"]
    assert handler["filters"] == ["routine"]
    assert settings.LOGGING["filters"]["routine"]["()"] == "hostapp.core.logs.QuietRoutine"
