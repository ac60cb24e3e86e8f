"""Outbox throughput: actions per second drained by Celery workers, and commit -> done latency.

Run from the repository root (PostgreSQL on 127.0.0.1:5432, user postgres, and Redis on
127.0.0.1:6379 must be running)::

    .venv/bin/python bench/bench_outbox.py [--actions 2000] [--workers 1,2] [--concurrency 4,8,16]
        [--enqueue bulk|start_call|paced] [--producers 4] [--rate 10] [--breakdown K]
        [--what-if NAME[,NAME]] [--json out.json] [--profile DIR] [--summarize DIR] [--keep]
        [--database-url postgres://postgres@127.0.0.1:5432/bench_outbox] [--redis-url redis://127.0.0.1:6379/14]

What it does:

1. A fresh PostgreSQL database ``bench_outbox`` (dropped first if a previous run left it,
   and dropped at the end), Redis database 14 (flushed first; broker and channel layer),
   or the ones ``--database-url`` and ``--redis-url`` name; a temporary
   ``PATCHBAY_DATA_DIR``; ``migrate``.
2. The bundled ``tasks`` server as a trusted stdio server
   (``sys.executable -m servers.tasks --data-dir <tmp>/servers``, cwd the repository root),
   refreshed through this process's pool, so ``tasks__add`` (a write tool: it goes through
   the outbox) is in the catalog.
3. For each worker count and each concurrency: start that many worker processes exactly as
   production does (``celery -A hostapp worker --pool threads --concurrency C
   -n w{i}@bench --without-mingle --without-gossip -l WARNING``, each in its own process
   group), wait until every one answers a ``ping``, warm them (``--warm`` actions per worker
   thread: each worker starts its stdio child and its threads open their database
   connections), then commit ``--actions`` calls to ``tasks__add`` and wait until every
   action is done. Then SIGTERM the workers (SIGKILL their groups after 20 s).

   How the calls are committed (``--enqueue``):

   * ``bulk`` (default): calls, their ``created``/``queued`` events and their actions are
     bulk-created in ONE transaction (the same field values ``start_call`` writes, with the
     policy decided once), and each action's wake-up is queued on commit with the app's own
     ``hostapp.outbox.actions._queue_delivery`` (no live events from the producer). The whole
     backlog is committed at one instant, so the drain is what is measured.
   * ``start_call``: ``hostapp.calls.actions.start_call`` from ``--producers`` threads, one
     transaction per call, as the web process and the agents' endpoint do (live events
     included). Throughput is then bounded by the producer as well; its rate is reported.
   * ``paced``: ``start_call`` from one thread at ``--rate`` calls per second: below
     capacity, the commit -> done latency of an action that does not wait behind a backlog.

   With ``bulk`` and ``start_call`` the whole backlog is there at once, so p50/p99 are mostly
   the wait behind it (about actions / rate / 2 and actions / rate).

4. Figures, from the database: actions/s = actions / (last ``Action.done_at`` - first
   commit); per-action latency commit -> done = ``Action.done_at`` - commit time, where the
   commit time is ``Call.created_at`` for ``start_call``/``paced`` (set a few ms before the
   commit) and the instant of the one commit for ``bulk`` (taken in the first on-commit hook).
   CPU ms per action (psutil) of the workers, their stdio children, the PostgreSQL backends
   connected to the bench database, the Redis server, this process, and the whole machine
   (machine minus ours = other people's load: the figures are only comparable with it); and
   the rate our processes would reach by CPU alone on this many idle cores.
5. Correctness at the end: every action of every run (warm-ups included) is done after one
   attempt, and the tasks server's SQLite holds exactly one idempotency record and exactly
   one task per idempotency key, the very task the call's result names.

``--profile DIR``: ``py-spy record --gil`` (raw collapsed stacks: threads holding the GIL, a
proxy for Python CPU) on worker 1 and on its stdio child during the drain of every run;
summarise them with ``--summarize DIR``. (py-spy is not in the requirements:
``.venv/bin/pip install py-spy``.)
``--what-if NAME``: the workers are started through this script, which patches the worker
process only (events on one long-lived loop, no events, acks on receipt) and then runs
Celery's own main: what a fix would gain, with the app unchanged.
``--breakdown K``: after the runs, K deliveries one at a time in this process (``deliver(id)``),
then K more drained in batches as a worker does (``drain``), each phase timed (claim, tool
lookup, the pool calls, record, live-event sends) and the SQL statements counted: what a
delivery costs without contention.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_RATE = 200.0  # actions/s with two workers


# The database (dropped and created again) and the Redis database (flushed) a run uses:
# --database-url and --redis-url.
DB_URL = "postgres://postgres@127.0.0.1:5432/bench_outbox"
REDIS_URL = "redis://127.0.0.1:6379/14"
DB_NAME = "bench_outbox"
PG = ["-h", "127.0.0.1", "-p", "5432", "-U", "postgres"]


def use(db_url: str, redis_url: str) -> None:
    """Run against this PostgreSQL database and this Redis database."""
    from urllib.parse import urlsplit

    global DB_URL, REDIS_URL, DB_NAME, PG
    parts = urlsplit(db_url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql") or not parts.path.strip("/"):
        raise SystemExit(f"--database-url must name a PostgreSQL database, not {db_url!r}")
    DB_URL, REDIS_URL, DB_NAME = db_url, redis_url, parts.path.strip("/")
    PG = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres"]


SERVER = "tasks"
TOOL = "tasks__add"
FINAL = ("done", "dead", "unknown", "discarded")


# --- environment ---------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def revision() -> str:
    """The commit measured, and whether app files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "hostapp", "servers"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (f" + uncommitted changes in {len(dirty.splitlines())} app files" if dirty else "")


def fresh_database() -> None:
    subprocess.run(["dropdb", *PG, "--if-exists", "--force", DB_NAME], check=True)
    subprocess.run(["createdb", *PG, DB_NAME], check=True)


def drop_database() -> None:
    subprocess.run(["dropdb", *PG, "--if-exists", "--force", DB_NAME], check=False)


def setup(data_dir: Path) -> dict[str, str]:
    """Environment for this process and the workers; Django set up and migrated."""
    env = {
        "DJANGO_SETTINGS_MODULE": "hostapp.settings",
        "DATABASE_URL": DB_URL,
        "REDIS_URL": REDIS_URL,
        "PATCHBAY_DATA_DIR": str(data_dir),
        "PATCHBAY_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(env)
    for name in ("PATCHBAY_DEBUG", "DEBUG"):
        os.environ.pop(name, None)
    import redis

    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return dict(os.environ)


def create_server(data_dir: Path) -> Any:
    from hostapp.catalog.models import Server, Tool
    from hostapp.catalog.pool import close_pool, refresh_server

    server = Server.objects.create(
        name=SERVER,
        transport=Server.STDIO,
        command=sys.executable,
        args=["-m", "servers.tasks", "--data-dir", str(data_dir / "servers")],
        cwd=str(REPO),
        trusted=True,
    )
    result = refresh_server(server)
    if not result.ok:
        raise SystemExit(f"refresh of {SERVER} failed: {result.error}")
    close_pool()  # this process needs no live connection to it any more
    tool = Tool.objects.select_related("server").get(exposed_name=TOOL)
    if tool.status != Tool.ACTIVE or tool.effective_class != "write":
        raise SystemExit(f"{TOOL} is {tool.status} / {tool.effective_class}, not an active write tool")
    return tool


# --- workers -------------------------------------------------------------------------------


class Worker:
    def __init__(self, index: int, concurrency: int, env: dict[str, str], log_dir: Path, what_if: str = "") -> None:
        self.name = f"w{index}@bench"
        self.log = log_dir / f"worker-w{index}-c{concurrency}.log"
        self._fh = self.log.open("ab")
        celery_args = ["-A", "hostapp", "worker", "--pool", "threads", "--concurrency", str(concurrency),
                       "-n", self.name, "--without-mingle", "--without-gossip", "-l", "WARNING"]  # fmt: skip
        # A what-if runs the same worker through this script, which patches the worker process
        # (and only it) before handing over to Celery's own main.
        command = (
            [sys.executable, "-m", "celery", *celery_args]
            if not what_if
            else [sys.executable, str(Path(__file__).resolve()), "--run-worker", what_if, *celery_args]
        )
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self._family: dict[int, Any] = {}

    def family(self) -> list[Any]:
        """The worker and its descendants (its stdio children run in their own groups)."""
        import psutil

        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self._family.setdefault(p.pid, p)
        return list(self._family.values())

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds so far of (the worker process, its stdio children)."""
        import psutil

        own = children = 0.0
        for p in self.family():
            with contextlib.suppress(psutil.NoSuchProcess):
                t = p.cpu_times()
                if p.pid == self.proc.pid:
                    own += t.user + t.system
                else:
                    children += t.user + t.system
        return own, children

    def stop(self) -> None:
        import psutil

        family = self.family()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        # Its stdio children stop when their stdin closes; make sure of it (only ours).
        for p in family:
            if p.pid == self.proc.pid:
                continue
            with contextlib.suppress(psutil.NoSuchProcess):
                p.wait(timeout=5)
                continue
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        self._fh.close()


def wait_for_workers(workers: list[Worker], timeout: float = 60.0) -> None:
    from hostapp.celery import app

    wanted = {w.name for w in workers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in workers:
            if w.proc.poll() is not None:
                raise SystemExit(f"worker {w.name} exited with {w.proc.returncode}; see {w.log}")
        replies = app.control.ping(destination=sorted(wanted), timeout=1.0)
        answered = {name for reply in replies for name in reply}
        if wanted <= answered:
            return
    raise SystemExit(f"workers did not answer a ping within {timeout:.0f}s: {sorted(wanted)}")


# --- enqueueing ----------------------------------------------------------------------------


def enqueue_bulk(tool: Any, n: int, tag: str) -> dict[str, Any]:
    """N calls + actions in ONE transaction; every wake-up queued on commit (the app's function)."""
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from hostapp.calls.actions import argument_digest
    from hostapp.calls.models import Call, CallEvent
    from hostapp.calls.policy import decide
    from hostapp.outbox import actions as outbox
    from hostapp.outbox.models import Action

    marks: dict[str, Any] = {}
    t0 = time.perf_counter()
    decision = decide(tool)
    assert decision.kind == Call.OUTBOX, decision
    max_attempts = tool.outbox_max_attempts or settings.PATCHBAY_OUTBOX_MAX_ATTEMPTS
    with transaction.atomic():
        # The first hook registered runs first: the commit instant.
        transaction.on_commit(
            lambda: marks.update(commit=timezone.now(), commit_perf=time.perf_counter(), commit_cpu=time.process_time())
        )
        now = timezone.now()
        calls = []
        for i in range(n):
            arguments = {"title": f"{tag} #{i}"}
            calls.append(
                Call(
                    requester_kind=Call.CLI,
                    requester_name="bench",
                    server_name=tool.server.name,
                    tool_name=tool.exposed_name,
                    original_name=tool.original_name,
                    tool=tool,
                    tool_class=tool.effective_class,
                    definition_hash=tool.definition_hash,
                    arguments=arguments,
                    argument_digest=argument_digest(arguments),
                    decision=decision.kind,
                    decision_reason=decision.reason,
                    status=Call.QUEUED,
                )
            )
        Call.objects.bulk_create(calls, batch_size=1000)
        actions = Action.objects.bulk_create(
            [Action(call=c, max_attempts=max_attempts, next_attempt_at=now) for c in calls], batch_size=1000
        )
        events = [CallEvent(call=c, kind="created", actor="bench", detail={"decision": decision.kind}) for c in calls]
        events += [
            CallEvent(call_id=a.call_id, kind="queued", detail={"action": a.pk, "key": a.idempotency_key})
            for a in actions
        ]
        CallEvent.objects.bulk_create(events, batch_size=2000)
        ids = [a.pk for a in actions]
        for action_id in ids:
            transaction.on_commit(lambda a=action_id: outbox._queue_delivery(a))
        marks["built"] = time.perf_counter() - t0
    marks["queued"] = time.perf_counter() - marks["commit_perf"]
    queue_cpu_ms = (time.process_time() - marks["commit_cpu"]) * 1000 / max(1, n)
    return {
        "ids": ids,
        "commit": marks["commit"],
        "build_s": round(marks["built"], 2),
        "queue_s": round(marks["queued"], 2),
        # CPU of this process per wake-up queued (deliver.delay), while the workers drain.
        "queue_cpu_ms_per_action": round(queue_cpu_ms, 2),
    }


def enqueue_start_call(n: int, tag: str, producers: int) -> dict[str, Any]:
    """start_call from `producers` threads, one transaction per call (the app's own path)."""
    from django.db import connection

    from hostapp.calls.actions import Requester, start_call
    from hostapp.calls.models import Call

    requester = Requester(Call.CLI, "bench")

    def produce(indices: range) -> list[int]:
        try:
            out = []
            for i in indices:
                call = start_call(TOOL, {"title": f"{tag} #{i}"}, requester)
                if call.status != Call.QUEUED and call.decision != Call.OUTBOX:
                    raise RuntimeError(f"call #{call.pk} was not queued: {call.status} {call.decision_reason}")
                out.append(call.pk)
            return out
        finally:
            connection.close()

    chunks = [range(k, n, producers) for k in range(producers)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(producers) as pool:
        call_ids = [pk for part in pool.map(produce, chunks) for pk in part]
    took = time.perf_counter() - t0
    from hostapp.outbox.models import Action

    ids = list(Action.objects.filter(call_id__in=call_ids).values_list("pk", flat=True))
    return {"ids": ids, "commit": None, "produce_s": took, "produce_rate": n / took}


def enqueue_paced(n: int, tag: str, rate: float) -> dict[str, Any]:
    """start_call from one thread at `rate` calls per second (below capacity: latency unqueued)."""
    from hostapp.calls.actions import Requester, start_call
    from hostapp.calls.models import Call
    from hostapp.outbox.models import Action

    requester = Requester(Call.CLI, "bench")
    call_ids = []
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        call_ids.append(start_call(TOOL, {"title": f"{tag} #{i}"}, requester).pk)
    took = time.perf_counter() - t0
    ids = list(Action.objects.filter(call_id__in=call_ids).values_list("pk", flat=True))
    return {"ids": ids, "commit": None, "produce_s": took, "produce_rate": n / took}


def wait_drained(ids: list[int], timeout: float) -> None:
    from hostapp.outbox.models import Action

    deadline = time.monotonic() + timeout
    left = len(ids)
    while time.monotonic() < deadline:
        left = Action.objects.filter(pk__in=ids).exclude(status__in=FINAL).count()
        if left == 0:
            return
        time.sleep(0.1)
    raise SystemExit(f"{left} of {len(ids)} actions not final after {timeout:.0f}s")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def figures(ids: list[int], commit: dt.datetime | None) -> dict[str, Any]:
    from hostapp.outbox.models import Action

    rows = list(Action.objects.filter(pk__in=ids).values_list("status", "call__created_at", "done_at", "attempts"))
    statuses = collections.Counter(r[0] for r in rows)
    done = [r for r in rows if r[0] == "done"]
    first = commit or min(r[1] for r in rows)
    last = max(r[2] for r in done)
    lat = [((r[2] - (commit or r[1])).total_seconds()) * 1000 for r in done]
    return {
        "statuses": dict(statuses),
        "retried": sum(1 for r in rows if r[3] > 1),
        "seconds": (last - first).total_seconds(),
        "rate": len(done) / (last - first).total_seconds(),
        "p50_ms": pct(lat, 0.50),
        "p99_ms": pct(lat, 0.99),
        "max_ms": max(lat),
    }


def system_cpu() -> float:
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "nice", 0)


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Meter:
    """CPU seconds of everything the drain runs on: the workers, their stdio children, the
    PostgreSQL backends connected to the bench database, the Redis server, this process;
    and the whole machine (the box is shared: what is left is other people's load)."""

    def __init__(self, workers: list[Worker]) -> None:
        import psutil
        from django.db import connection

        self.workers = workers
        with connection.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [DB_NAME])
            pids = [row[0] for row in cur.fetchall()]
        self.backends = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                self.backends.append(psutil.Process(pid))
        self.redis = []
        for p in psutil.process_iter(["name", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                if p.info["name"] == "redis-server" and any("6379" in a for a in p.info["cmdline"] or []):
                    self.redis.append(p)

    @staticmethod
    def _sum(procs: list[Any]) -> float:
        import psutil

        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def read(self) -> dict[str, float]:
        own = [w.cpu_seconds() for w in self.workers]
        return {
            "worker": sum(o for o, _ in own),
            "stdio child": sum(c for _, c in own),
            "postgres": self._sum(self.backends),
            "redis": self._sum(self.redis),
            "bench": self_cpu(),
            "machine": system_cpu(),
            "wall": time.monotonic(),
        }

    @staticmethod
    def per_action(a: dict[str, float], b: dict[str, float], n: int) -> dict[str, float]:
        out = {k: (b[k] - a[k]) * 1000 / n for k in a if k != "wall"}
        out["ours"] = sum(out[k] for k in ("worker", "stdio child", "postgres", "redis", "bench"))
        out["others"] = out["machine"] - out["ours"]
        return out


# --- one configuration -----------------------------------------------------------------------


def run_one(
    opts: argparse.Namespace, tool: Any, env: dict[str, str], nworkers: int, conc: int, log_dir: Path
) -> dict[str, Any]:
    from django.db import close_old_connections

    tag = f"w{nworkers}c{conc}" + (f"-{opts.what_if}" if opts.what_if else "")
    workers = [Worker(i, conc, env, log_dir, opts.what_if) for i in range(1, nworkers + 1)]
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        wait_for_workers(workers)
        warm = enqueue_bulk(tool, opts.warm * conc * nworkers, f"warm {tag}")
        wait_drained(warm["ids"], 120)
        time.sleep(0.5)
        close_old_connections()
        profilers = []
        if opts.profile:
            spy = str(Path(sys.executable).parent / "py-spy")
            family = workers[0].family()
            targets = [("worker", workers[0].proc.pid)] + [
                ("child", p.pid) for p in family if p.pid != workers[0].proc.pid
            ][:1]
            for label, pid in targets:
                out = Path(opts.profile) / f"{tag}-{opts.enqueue}-w1-{label}.txt"
                profilers.append(
                    subprocess.Popen(
                        [spy, "record", "-p", str(pid), "-r", "200", "-d", "600", "--gil", "--format", "raw",
                         "--threads", "-o", str(out)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )  # fmt: skip
            time.sleep(1.5)  # py-spy attaches
        meter = Meter(workers)
        load0 = os.getloadavg()[0]
        before = meter.read()
        if opts.enqueue == "bulk":
            batch = enqueue_bulk(tool, opts.actions, f"bench {tag}")
        elif opts.enqueue == "paced":
            batch = enqueue_paced(opts.actions, f"bench {tag}", opts.rate)
        else:
            batch = enqueue_start_call(opts.actions, f"bench {tag}", opts.producers)
        wait_drained(batch["ids"], opts.timeout)
        after = meter.read()
        load1 = os.getloadavg()[0]
        for profiler in profilers:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                profiler.wait(timeout=30)
        result = figures(batch["ids"], batch["commit"])
        n = len(batch["ids"])
        cpu = Meter.per_action(before, after, n)
        result.update(
            workers=nworkers,
            concurrency=conc,
            what_if=opts.what_if or "-",
            enqueue=opts.enqueue,
            actions=n,
            cpu_ms=cpu,
            # What our own processes would sustain on this many idle cores, by CPU alone.
            cpu_bound_rate=(os.cpu_count() or 1) * 1000 / cpu["ours"],
            busy_cores_others=cpu["others"] * n / 1000 / (after["wall"] - before["wall"]),
            load=(load0, load1),
            enqueue_info={k: v for k, v in batch.items() if k not in ("ids", "commit")},
        )
        return result
    finally:
        for profiler in profilers:
            if profiler.poll() is None:
                profiler.kill()
        for w in workers:
            w.stop()


# --- correctness -------------------------------------------------------------------------------


def check(data_dir: Path) -> list[str]:
    from hostapp.calls.models import Call
    from hostapp.outbox.models import Action, Attempt

    problems = []
    total = Action.objects.count()
    not_done = Action.objects.exclude(status="done").count()
    if not_done:
        problems.append(f"{not_done} of {total} actions are not done")
    extra = Action.objects.filter(attempts__gt=1).count()
    if extra:
        problems.append(f"{extra} actions took more than one attempt")
    if Attempt.objects.count() != total:
        problems.append(f"{Attempt.objects.count()} attempts recorded for {total} actions")
    keys = dict(Action.objects.values_list("idempotency_key", "call_id"))
    results = dict(Call.objects.filter(pk__in=keys.values()).values_list("pk", "result"))
    with contextlib.closing(sqlite3.connect(f"file:{data_dir / 'servers' / 'tasks.sqlite3'}?mode=ro", uri=True)) as db:
        records = db.execute("SELECT key, tool, result_json FROM idempotency_keys").fetchall()
        tasks = dict(db.execute("SELECT id, title FROM tasks").fetchall())
    recorded = collections.Counter(r[0] for r in records)
    dup = [k for k, c in recorded.items() if c > 1]
    if dup:
        problems.append(f"{len(dup)} keys recorded more than once")
    missing = set(keys) - set(recorded)
    if missing:
        problems.append(f"{len(missing)} action keys have no record in the tasks server")
    stray = set(recorded) - set(keys)
    if stray:
        problems.append(f"{len(stray)} records in the tasks server for keys no action has")
    task_of_key = {k: json.loads(r)["id"] for k, tool, r in records}
    if len(set(task_of_key.values())) != len(task_of_key):
        problems.append("two keys point at the same task")
    seeded = len(tasks) - len(task_of_key)
    if seeded != 5:  # the tasks server seeds five tasks
        problems.append(f"{len(tasks)} tasks for {len(task_of_key)} keys: {seeded - 5} tasks without a key")
    wrong = 0
    for key, call_id in keys.items():
        result = results.get(call_id) or {}
        if (result.get("structuredContent") or {}).get("id") != task_of_key.get(key):
            wrong += 1
    if wrong:
        problems.append(f"{wrong} calls' results do not name the task recorded for their key")
    print(
        f"\ncorrectness: {total} actions, {total - not_done} done, {len(records)} idempotency records, "
        f"{len(tasks)} tasks (5 seeded): " + ("OK" if not problems else "; ".join(problems))
    )
    return problems


# --- breakdown: deliveries in this process, phase by phase ---------------------------------------


def breakdown(tool: Any, k: int) -> dict[str, Any]:
    """Deliver K actions one at a time (`deliver(id)`), then K more as a drain does (batches
    of the app's batch size), in this process; each phase timed exclusively (wall and process
    CPU: the pool's loop thread and asgiref's helper threads are this process too) by wrappers
    set in this process only (the app is unchanged); SQL statements counted."""
    import redis
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from hostapp.calls.actions import Requester, start_call
    from hostapp.calls.models import Call
    from hostapp.core import events
    from hostapp.outbox import actions as outbox
    from hostapp.outbox.models import Action

    def forget_wakeups() -> None:
        """Wake-ups went to Redis with no worker listening: take them back out."""
        time.sleep(0.5)
        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        client.delete("celery", outbox.WAKE_KEY)

    # The producer's side: start_call, one transaction per call (live events queued on commit).
    requester = Requester(Call.CLI, "bench")
    producer_wall, producer_cpu, call_ids = [], [], []
    producer_queries = []
    for i in range(2 * k + 5):
        with CaptureQueriesContext(connection) as ctx:
            w0, c0 = time.perf_counter(), time.process_time()
            call_ids.append(start_call(TOOL, {"title": f"breakdown #{i}"}, requester).pk)
            w, c = time.perf_counter() - w0, time.process_time() - c0
        if i >= 5:
            producer_wall.append(w * 1000)
            producer_cpu.append(c * 1000)
            producer_queries.append(len(ctx.captured_queries))
    forget_wakeups()
    ids = list(Action.objects.filter(call_id__in=call_ids).order_by("pk").values_list("pk", flat=True))
    for action_id in ids[:5]:  # warm: the pool's connection, the first queries
        outbox.deliver(action_id, worker="breakdown")

    wall: dict[str, list[float]] = collections.defaultdict(list)
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    stack: list[list[float]] = []  # [wall, cpu] spent in timed callees of the current frame

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            stack.append([0.0, 0.0])
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                w, c = time.perf_counter() - w0, time.process_time() - c0
                inner = stack.pop()
                wall[name].append((w - inner[0]) * 1000)
                cpu[name].append((c - inner[1]) * 1000)
                if stack:
                    stack[-1][0] += w
                    stack[-1][1] += c

        return wrapper

    names = ("claim_batch", "_send_all", "record_batch")
    originals = {name: getattr(outbox, name) for name in names}
    original_send = events._send
    labels = {
        "claim_batch": "claim (its transaction)",
        "_send_all": "pool calls (stdio round trips, concurrent within a batch)",
        "record_batch": "record (its transaction)",
    }

    def measure(run: Any, n: int) -> dict[str, Any]:
        wall.clear()
        cpu.clear()
        statements: collections.Counter[str] = collections.Counter()
        for name in names:
            setattr(outbox, name, timed(labels[name], originals[name]))
        events._send = timed("live events (_send, in the caller)", original_send)
        try:
            with CaptureQueriesContext(connection) as ctx:
                w0, c0 = time.perf_counter(), time.process_time()
                timed("the rest (tool lookup, arguments, checks)", run)()
                total_wall, total_cpu = time.perf_counter() - w0, time.process_time() - c0
        finally:
            for name in names:
                setattr(outbox, name, originals[name])
            events._send = original_send
        for q in ctx.captured_queries:
            statements[q["sql"].split()[0].upper()] += 1
        phases = {
            name: {"wall_ms": round(sum(wall[name]) / n, 2), "cpu_ms": round(sum(cpu[name]) / n, 2)} for name in wall
        }
        phases["whole delivery"] = {
            "wall_ms": round(total_wall * 1000 / n, 2),
            "cpu_ms": round(total_cpu * 1000 / n, 2),
        }
        return {
            "phases (per delivery: totals / deliveries)": phases,
            "sql statements per delivery": round(len(ctx.captured_queries) / n, 2),
            "by verb": {verb: round(count / n, 2) for verb, count in statements.items()},
        }

    single_ids, batch_ids = ids[5 : 5 + k], ids[5 + k :]
    single = measure(lambda: [outbox.deliver(i, worker="breakdown") for i in single_ids], len(single_ids))
    drained: dict[str, int] = {}
    batched = measure(lambda: drained.update(outbox.drain("breakdown", seconds=600)), len(batch_ids))
    forget_wakeups()  # a full batch wakes another worker
    return {
        "start_call (producer; per call)": {
            "wall_ms": round(statistics.median(producer_wall), 2),
            "cpu_ms": round(statistics.mean(producer_cpu), 2),
            "sql statements": statistics.median(producer_queries),
        },
        "deliveries": k,
        "one at a time: deliver(id)": single,
        f"drained (batches of {outbox.batch_size()})": {**batched, "outcomes": drained},
        "not done": Action.objects.filter(pk__in=ids).exclude(status="done").count(),
    }


def _frame(f: str) -> str:
    """'func (path/file.py:123)' -> 'func (path/file.py)'."""
    name, _, where = f.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def summarize(profile_dir: Path, top: int = 30) -> None:
    """Where the GIL-holding samples go (py-spy --gil, raw format: one "stack count" line
    per distinct stack; a sample is a thread seen running). Inclusive shares by function."""
    for path in sorted(profile_dir.glob("*.txt")):
        inclusive: collections.Counter[str] = collections.Counter()
        leaves: collections.Counter[str] = collections.Counter()
        threads: collections.Counter[str] = collections.Counter()
        total = 0
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            thread = frames[0].split(": ", 1)[-1].rstrip("0123456789_-")
            threads[thread] += n
            total += n
            for name in {_frame(f) for f in frames[1:]}:
                inclusive[name] += n
            leaves[_frame(frames[-1])] += n
        print(f"\n## {path.name}: {total} on-CPU samples")
        print("by thread: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in threads.most_common()))
        for name, n in inclusive.most_common(top):
            print(f"{100 * n / total:6.1f}%  {name}")
        print("self time (leaf functions):")
        for name, n in leaves.most_common(15):
            print(f"{100 * n / total:6.1f}%  {name}")


# --- what-ifs: the worker patched in its own process (the app's code is unchanged) ------------

WHAT_IFS = {
    "events-shared-loop": "live events sent on one long-lived event loop per process (one Redis connection)",
    "no-events": "no live events from the worker (the upper bound of what events cost)",
    "acks-early": "the deliver task acked on receipt instead of acks_late",
    "no-page-logs": "the server is not asked for log messages for the call's page (calls.actions.shown)",
}


def run_worker(what_if: str, celery_args: list[str]) -> None:
    """`bench_outbox.py --run-worker NAME[,NAME] <celery args>`: patch, then Celery's main."""
    import asyncio

    from celery import signals

    names = [n for n in what_if.split(",") if n]
    unknown = set(names) - set(WHAT_IFS)
    if unknown:
        raise SystemExit(f"unknown what-if: {sorted(unknown)}")

    @signals.worker_init.connect(weak=False)
    def patch(**_: Any) -> None:
        import django

        django.setup()
        from hostapp.core import events

        if "no-events" in names:
            events._send = lambda kind, data: None
        elif "events-shared-loop" in names:
            from channels.layers import get_channel_layer

            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="bench-events", daemon=True).start()
            layer = get_channel_layer()

            def send(kind: str, data: dict[str, Any]) -> None:
                message = {"type": "live.event", "kind": kind, "data": data}
                asyncio.run_coroutine_threadsafe(layer.group_send(events.LIVE_GROUP, message), loop).result(5)

            events._send = send
        if "no-page-logs" in names:
            from hostapp.calls import actions as call_actions

            with_page = call_actions.shown
            call_actions.shown = lambda call_id, watch=None: dataclasses.replace(  # type: ignore[assignment]
                with_page(call_id, watch), on_log=None, log_level=""
            )
        if "acks-early" in names:
            from hostapp.celery import app

            app.tasks["hostapp.outbox.deliver"].acks_late = False

    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *celery_args]
    celery_main()


# --- main ------------------------------------------------------------------------------------


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| workers | concurrency | what-if | enqueue | actions | actions/s | p50 ms | p99 ms | CPU ms/action: worker "
        "| stdio child | PostgreSQL | Redis | other people's load (cores) |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c = r["cpu_ms"]
        lines.append(
            f"| {r['workers']} | {r['concurrency']} | {r['what_if']} | {r['enqueue']} | {r['actions']} | {r['rate']:.0f} "
            f"| {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {c['worker']:.1f} | {c['stdio child']:.1f} "
            f"| {c['postgres']:.1f} | {c['redis']:.1f} | {r['busy_cores_others']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--run-worker"]:
        run_worker(argv[1], argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", type=int, default=2000, help="actions per run (default 2000)")
    parser.add_argument("--workers", type=ints, default=[1, 2], help="worker counts, e.g. 1,2")
    parser.add_argument("--concurrency", type=ints, default=[8], help="threads per worker, e.g. 4,8,16")
    parser.add_argument("--enqueue", choices=("bulk", "start_call", "paced"), default="bulk")
    parser.add_argument("--rate", type=float, default=10.0, help="calls per second (--enqueue paced)")
    parser.add_argument("--producers", type=int, default=4, help="threads calling start_call (--enqueue start_call)")
    parser.add_argument("--warm", type=int, default=3, help="warm-up actions per worker thread (default 3)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for one drain")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--profile", help="py-spy record worker 1 during each drain into this directory")
    parser.add_argument("--breakdown", type=int, default=0, help="K serial deliveries in-process, timed by phase")
    parser.add_argument(
        "--what-if",
        default="",
        help="patch the workers (comma-separated): " + "; ".join(f"{k}: {v}" for k, v in WHAT_IFS.items()),
    )
    parser.add_argument("--keep", action="store_true", help="keep the database and data directory")
    parser.add_argument(
        "--database-url", default=DB_URL, help=f"PostgreSQL database, dropped and created again (default {DB_URL})"
    )
    parser.add_argument("--redis-url", default=REDIS_URL, help=f"Redis database, flushed (default {REDIS_URL})")
    parser.add_argument("--summarize", help="summarise the py-spy profiles in this directory and exit")
    opts = parser.parse_args(argv)
    use(opts.database_url, opts.redis_url)
    if opts.summarize:
        summarize(Path(opts.summarize))
        return 0
    if opts.profile:
        Path(opts.profile).mkdir(parents=True, exist_ok=True)

    data_dir = Path(tempfile.mkdtemp(prefix="bench-outbox-"))
    fresh_database()
    results: list[dict[str, Any]] = []
    problems: list[str] = ["not checked"]
    extra: dict[str, Any] = {}
    try:
        env = setup(data_dir)
        tool = create_server(data_dir)
        print(
            f"# Outbox drain: {opts.actions} x {TOOL}, enqueue={opts.enqueue}; {dt.date.today()}; "
            f"{os.cpu_count()} CPUs ({cpu_model()}); Python {platform.python_version()}; commit {revision()}; "
            f"data {data_dir}"
        )
        for nworkers in opts.workers:
            for conc in opts.concurrency:
                r = run_one(opts, tool, env, nworkers, conc, data_dir)
                results.append(r)
                print(
                    f"workers={nworkers} concurrency={conc}: {r['rate']:.1f} actions/s over {r['seconds']:.2f}s, "
                    f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms; "
                    f"CPU ms/action {json.dumps({k: round(v, 2) for k, v in r['cpu_ms'].items()})}; "
                    f"CPU-bound rate on {os.cpu_count()} idle cores {r['cpu_bound_rate']:.0f}/s; "
                    f"others' load {r['busy_cores_others']:.2f} cores, loadavg {r['load']}; "
                    f"{r['statuses']}; enqueue {r['enqueue_info']}",
                    flush=True,
                )
        problems = check(data_dir)
        if opts.breakdown:
            extra["breakdown"] = breakdown(tool, opts.breakdown)
            print("\nbreakdown (in-process: one at a time, then drained in batches):")
            print(json.dumps(extra["breakdown"], indent=2))
        print()
        print(table(results))
        two = [r["rate"] for r in results if r["workers"] == 2]
        if two:
            best = max(two)
            verdict = "met" if best >= TARGET_RATE else "NOT met"
            print(f"\nbest with two workers: {best:.0f} actions/s; target {TARGET_RATE:.0f}/s {verdict}")
        if opts.json:
            Path(opts.json).write_text(
                json.dumps(
                    {"revision": revision(), "results": results, "problems": problems, **extra}, indent=2, default=str
                )
            )
    finally:
        with contextlib.suppress(Exception):  # Django may not be set up if setup failed
            from django.db import connections

            connections.close_all()
        if not opts.keep:
            drop_database()
            import shutil

            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"kept: database {DB_NAME}, data directory {data_dir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
