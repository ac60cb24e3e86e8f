"""Ledger rows written behind the answer, for read-only calls the agents' endpoint ran at once.

A read-only call from an agent is answered as soon as its server has answered; its row
(with its two events, created and finished) goes to this process's ledger writer, a
thread that writes what arrived within a tenth of a second (PATCHBAY_LEDGER_BATCH_MS) in
one transaction and then tells open pages. Every call still becomes a row: within a tenth
of a second after its answer instead of before it (PATCHBAY_LEDGER_WRITE_BEHIND=false:
before it, as every other call). A call that runs longer than a moment is written first, as
running, like any other (the endpoint decides that; see hostapp/gateway/server.py).

What is not written yet lives in this process's memory:

* on a normal stop (SIGTERM, Ctrl-C) the writer empties its queue before the process
  exits;
* when the database refuses a batch, the writer keeps it and tries again, backing off,
  and says it is not `accepting()`: the endpoint then sends calls the way that writes
  first (which fails loudly while the database is down) until the writer has caught up;
  a batch that was committed before the connection was lost is not written twice (each
  row carries a write key, and a retry leaves out the rows already there);
* a row the database refuses for what it holds (PostgreSQL takes no NUL byte or NaN in
  JSON) is written with its result replaced by a note saying why; one it still refuses is
  logged in full, at ERROR, and left out, so that one bad row does not hold the others back;
* a process killed outright (SIGKILL, a power cut) loses the rows of the read-only calls
  it answered in its last tenth of a second.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

# Imported first so that its exit handler, registered on import, runs after the writer's
# (exit handlers run last registered first): the rows' live events are queued by then.
from hostapp.core import events  # noqa: F401
from hostapp.core.batching import Batcher, with_session

from .models import Call, CallEvent

logger = logging.getLogger(__name__)

# What arrives within PATCHBAY_LEDGER_BATCH_MS after the first row of a batch is written
# with it: one transaction for all costs the process less than many.
BATCH_MAX = 200
# Rows waiting beyond this many: the endpoint writes before answering until the writer catches up.
BACKLOG_MAX = 2000
# The writer's database session is closed after this long without calls.
IDLE_CLOSE = 2.0
RETRY_FIRST = 0.2
RETRY_MAX = 5.0


class Event(NamedTuple):
    """One of a call's events, as written."""

    kind: str
    actor: str
    detail: dict[str, Any]
    at: datetime


@dataclass
class Finished:
    """A call's row (with `created_at`, its start) and its events (created, then how it ended)."""

    fields: dict[str, Any]
    events: list[Event]


def write(batch: list[Finished], *, retry: bool = False) -> list[Call]:
    """Write calls and their events in one transaction; pages hear of them on commit.

    A tool removed from the catalog or an agent token deleted since the call leaves the
    row without that link (as deleting it afterwards would: `SET_NULL`). A `retry` of a
    batch first leaves out the calls whose `write_key` is already there: the attempt
    before may have committed and lost its connection before it heard so."""
    from hostapp.catalog.models import Tool
    from hostapp.gateway.models import AgentToken

    from .actions import _broadcast

    tools = {f.fields.get("tool_id") for f in batch} - {None}
    agents = {f.fields.get("requester_agent_id") for f in batch} - {None}
    with transaction.atomic():
        if retry:
            keys = [f.fields["write_key"] for f in batch if f.fields.get("write_key")]
            there = set(Call.objects.filter(write_key__in=keys).values_list("write_key", flat=True))
            batch = [f for f in batch if f.fields.get("write_key") not in there]
            if not batch:
                return []
        live_tools = set(Tool.objects.filter(pk__in=tools).values_list("pk", flat=True)) if tools else set()
        live_agents = set(AgentToken.objects.filter(pk__in=agents).values_list("pk", flat=True)) if agents else set()
        rows = []
        for f in batch:
            fields = dict(f.fields)
            if fields.get("tool_id") not in live_tools:
                fields["tool_id"] = None
            if fields.get("requester_agent_id") not in live_agents:
                fields["requester_agent_id"] = None
            rows.append(Call(**fields))
        calls = Call.objects.bulk_create(rows)
        CallEvent.objects.bulk_create(
            CallEvent(call=call, kind=e.kind, actor=e.actor, detail=e.detail, at=e.at)
            for call, f in zip(calls, batch, strict=True)
            for e in f.events
        )
        for call in calls:
            _broadcast(call)
    return calls


def _storable(item: Finished, error: Exception) -> list[Finished]:
    """The call as rows the database may take, to try in turn: its result replaced by a
    note of why it is not kept (PostgreSQL takes no NUL byte or NaN in JSON), then its
    arguments too."""
    note = f"not stored: the database refused it ({type(error).__name__}: {str(error)[:300]})"
    result = {"content": [{"type": "text", "text": note}], "isError": bool(item.fields.get("is_error"))}
    without_result = {**item.fields, "result": result}
    return [
        Finished(without_result, item.events),
        Finished({**without_result, "arguments": {"_patchbay": note}}, item.events),
    ]


class LedgerWriter:
    """One per process: a queue of finished calls and the thread that writes them
    (a `hostapp.core.batching.Batcher`)."""

    def __init__(self) -> None:
        # The process whose writer is failing (a forked child starts afresh).
        self._failing_in = 0
        # The thread's own session, closed when idle: no database session held for nothing.
        self._batcher: Batcher[Finished] = with_session(
            "ledger-writer",
            self._write_batch,
            window=lambda: settings.PATCHBAY_LEDGER_BATCH_MS / 1000,
            limit=BATCH_MAX,
            idle=IDLE_CLOSE,
        )

    def accepting(self) -> bool:
        """Whether calls may be answered before their row is written."""
        return self._failing_in != os.getpid() and self._batcher.backlog < BACKLOG_MAX

    def submit(self, item: Finished) -> None:
        self._batcher.submit(item)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every call submitted so far is written (or, if it never can be, logged)."""
        return self._batcher.flush(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, then end the thread (at exit). Pages hear of the last rows
        from the live events' own exit handler, which runs after this one (see below)."""
        if not self._batcher.stop(timeout):
            logger.error(
                "the ledger writer did not finish within %.0fs: %d answered calls are not recorded",
                timeout,
                self._batcher.backlog,
            )

    def _write_batch(self, batch: list[Finished]) -> None:
        try:
            self._persist(batch)
        finally:
            self._failing_in = 0

    def _persist(self, batch: list[Finished]) -> None:
        """Write the batch, retrying while the database is unreachable or busy; rows it
        refuses for what they hold are written one by one, with what it refuses replaced
        (see `_storable`), and a row it still refuses is logged in full."""
        delay = RETRY_FIRST
        original, fallbacks = batch[0], None
        for item in batch:
            item.fields.setdefault("write_key", uuid.uuid4())
        retry = False
        while True:
            try:
                # The writer keeps its session between batches (opening one costs more than a
                # batch); it closes it after an error, and when idle (IDLE_CLOSE).
                write(batch, retry=retry)
                return
            except (OperationalError, InterfaceError) as exc:
                retry = True
                self._failing_in = os.getpid()
                logger.warning(
                    "the ledger could not be written (%s): %d calls kept, retrying in %.1fs", exc, len(batch), delay
                )
                connection.close()
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
            except Exception as exc:  # boundary: a row's content, not the database's state
                if len(batch) > 1:
                    for item in batch:
                        self._persist([item])
                    return
                if fallbacks is None:
                    fallbacks = _storable(original, exc)
                if not fallbacks:
                    logger.error("a call the database refuses is not recorded (%s): %r", exc, original)
                    return
                logger.warning("a call is recorded without what the database refuses (%s)", exc)
                batch = [fallbacks.pop(0)]


writer = LedgerWriter()
atexit.register(writer.stop)
