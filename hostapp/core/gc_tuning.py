"""How often Python's garbage collector runs in Patchbay's processes.

CPython collects its youngest generation each time 700 more container objects (dicts,
lists, instances) have been made than freed since the last collection. A refresh makes
them by the hundred thousand: a listing of a hundred tools is parsed into tens of
thousands of dicts and lists, validated into models and dumped back, and each lives for a
few milliseconds. Collected every 700, many are caught alive, promoted, and promoted
again, and what is promoted brings on full collections, each of which walks every object
of the process (Django, the SDK, pydantic: some 400,000). In the catalog benchmark, a
full refresh of 100 servers spent a quarter to a third of the host's CPU collecting,
most of it in full collections.

A larger first threshold lets those objects die, freed by their reference counts, before
a collection sees them. Nothing else changes: reference counting frees what it freed
before, and garbage in cycles (rare in this code) waits a little longer for its
collection. `PATCHBAY_GC_THRESHOLD` sets it (0: Python's own); the older generations keep
Python's factors. See docs/benchmarks.md ("Garbage collector threshold").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings


def tune_gc() -> tuple[int, int, int]:
    """Set this process's threshold from the settings, for the rest of its life (the web
    process and the worker call it when they start). Returns the thresholds now in force."""
    threshold = settings.PATCHBAY_GC_THRESHOLD
    if threshold:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
    return gc.get_threshold()


@contextmanager
def tuned_gc() -> Iterator[tuple[int, int, int]]:
    """The threshold from the settings while the block runs (a command's refresh), and
    the one before it afterwards."""
    before = gc.get_threshold()
    try:
        yield tune_gc()
    finally:
        gc.set_threshold(*before)
