"""The catalog refresh under different garbage collector thresholds, A/B in one process.

Run from the repository root::

    .venv/bin/python bench/bench_gc.py [--thresholds 700,20000] [--rounds 3] [--threads 8]
        [--servers 100] [--tools 100]

    # on PostgreSQL
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_catalog .venv/bin/python bench/bench_gc.py

The setup is `bench_catalog.py`'s (Django, an embedded Redis unless ``REDIS_URL``, the
catalog servers in one child process, one ``Server`` row each). Then, for each round and
each threshold (the order reversed every other round, so that a drift of the machine's
speed falls on both), the first generation's threshold is set (700 is Python's own; the
older generations keep Python's factors) and one cycle of full refreshes runs from
``--threads`` threads, as in ``bench_catalog.py``: ``first`` (cold pool, empty catalog),
``unchanged`` (warm pool), ``listing only`` (no database), ``changed`` (every tool),
``cold`` (pool closed first, nothing changed).

For each phase and threshold: the wall time, this process's CPU time (Patchbay's side:
the pool, the merge, the database client), the time spent in collections (measured with
``gc.callbacks``, from the start to the end of each collection), and the CPU time of the
catalog servers and (on a PostgreSQL on this machine) of the database, as the median and
range over the rounds. Comparing within one run is the point: this machine's speed
drifts by tens of per cent from one minute to the next.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_catalog as bc  # noqa: E402


class CollectionTimer:
    """Time spent in the garbage collector, per generation, while installed."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.perf_counter() - self._started
            self.counts[generation] += 1

    def reset(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]


PHASES = ("first", "unchanged", "listing only", "changed", "cold")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--thresholds", default="700,20000", help="first-generation thresholds to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--tools", type=int, default=100)
    args = parser.parse_args(argv)
    thresholds = [int(t) for t in args.thresholds.split(",")]

    data_dir = tempfile.mkdtemp(prefix="patchbay-bench-gc-")
    bc.setup_django(data_dir)
    from django.conf import settings
    from django.db import connection

    from hostapp.catalog.pool import close_pool

    redis_proc = bc.start_embedded_redis(Path(settings.REDIS_SOCKET)) if settings.REDIS_EMBEDDED else None
    port = bc.free_port()
    servers_proc = bc.start_catalog_servers(port, args.servers, args.tools, Path(data_dir) / "catalog_servers.log")
    timer = CollectionTimer()
    gc.callbacks.append(timer)
    _, older, oldest = gc.get_threshold()
    # (phase, threshold) -> [(wall, CPU Patchbay, CPU servers, CPU PostgreSQL or None, gc seconds, full collections)]
    figures: dict[tuple[str, int], list[tuple[float, float, float, float | None, float, int]]] = {}
    try:
        names = bc.create_servers(port, args.servers)
        db = "SQLite" if connection.vendor == "sqlite" else "PostgreSQL"
        print(
            f"# {args.servers} servers x {args.tools} tools, {db}, {args.threads} threads, "
            f"{bc.cpu_model()}, app {bc.app_version()}",
            flush=True,
        )
        revision = 0
        for round_no in range(args.rounds):
            for threshold in thresholds if round_no % 2 == 0 else thresholds[::-1]:
                gc.set_threshold(threshold, older, oldest)
                bc.reset_catalog(port)
                for phase in PHASES:
                    one, expect = bc.refresh_one, phase
                    if phase == "listing only":
                        one, expect = bc.list_one, "list"
                    elif phase == "changed":
                        revision += 1
                        bc.set_revision(port, revision)
                    elif phase == "cold":
                        close_pool()
                        expect = "unchanged"
                    timer.reset()
                    clock = bc.CpuClock(servers_proc.pid)
                    elapsed, results = bc.refresh_all(names, args.threads, one)
                    cpu, servers_cpu, db_cpu = clock.spent()
                    failures = bc.check(results, args.servers, args.tools, expect)
                    if failures:
                        raise SystemExit(f"{phase} at threshold {threshold}: {failures[0]}")
                    figures.setdefault((phase, threshold), []).append(
                        (elapsed, cpu, servers_cpu, db_cpu, sum(timer.seconds), timer.counts[2])
                    )
            print(f"# round {round_no + 1} of {args.rounds} done", flush=True)
    finally:
        gc.callbacks.remove(timer)
        bc.stop(servers_proc)
        bc.stop(redis_proc)

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    with_db = all(r[3] is not None for runs in figures.values() for r in runs)
    print(
        "\n| refresh | threshold | wall, s | CPU Patchbay, s | in collections, s | full collections | CPU servers, s"
        + (" | CPU PostgreSQL, s |" if with_db else " |")
    )
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if with_db else ""))
    for phase in PHASES:
        for threshold in thresholds:
            runs = figures[(phase, threshold)]
            print(
                f"| {phase} | {threshold} | {cell([r[0] for r in runs])} | {cell([r[1] for r in runs])} "
                f"| {cell([r[4] for r in runs])} | {statistics.median(r[5] for r in runs):.0f} "
                f"| {cell([r[2] for r in runs])} |" + (f" {cell([r[3] for r in runs])} |" if with_db else "")  # type: ignore[misc]
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
