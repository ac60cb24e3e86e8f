"""The outbox survives dying workers and a Redis restart: real worker processes, a real server.

300 writes to the bundled tasks server go through the outbox (started from a thread while the
workers run, at most 40 ahead of the deliveries) and a real
`celery -A hostapp worker --pool threads --concurrency 4` drains them.
The test SIGKILLs the worker's process group five times mid-drain (each time after it completed
some actions and while it holds a lease) and starts a new one; it runs the sweeper itself
(`actions.sweep()`, what beat runs every 5 s). Leases are 5 s, in the workers and here.
Afterwards every action is done, and the tasks server's own SQLite file shows exactly one task
per action and one recorded idempotency key per action key: nothing lost, nothing done twice.

The second test does the same with the test's own Redis (the broker) killed and started again in
the middle: every queued wake-up is lost with it, and the sweeper finds the actions again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from django.db import connection, transaction
from pytest_django.fixtures import Settings

from hostapp.outbox import actions
from hostapp.outbox.models import Action
from tests.helpers import PYTHON, REPO, clean_env, wait_until

from .conftest import OwnRedis, broker, bundled_tasks, server_rows, start, subprocess_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ACTIONS = 300
KILLS = 5
# Each worker incarnation completes at least this many actions before it is killed.
PROGRESS_PER_LIFE = 30
# The calls are started at most this far ahead of the deliveries, so that a backlog is left
# for every incarnation: a worker that drains in batches would otherwise finish the 300 before
# the fifth kill.
AHEAD = 40
LEASE = 5
# Generous: a loaded CI machine is slow; on a quiet one each test takes about a minute.
DEADLINE = 240.0


class Worker:
    """One `celery worker` incarnation in its own process group, logging to a file."""

    def __init__(self, number: int, logs: Path, redis_url: str | None) -> None:
        self.number = number
        self.log = logs / f"worker-{number}.log"
        env = clean_env(
            DATABASE_URL=subprocess_database_url(),
            REDIS_URL=redis_url,
            PATCHBAY_OUTBOX_LEASE=str(LEASE),
            PATCHBAY_LOG_LEVEL="INFO",
        )
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "celery", "-A", "hostapp", "worker", "--pool", "threads", "--concurrency", "4"]
                + ["-l", "INFO", "-n", f"crash{number}@%h", "--without-mingle", "--without-gossip"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.servers: set[int] = set()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def report(self) -> str:
        """The end of its log, after it wrote every thread's stack there (Celery's SIGUSR1
        handler), for a failure message: where a stuck worker waits."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(2)
        return self.output()[-20000:]

    def note_children(self) -> None:
        """Remember the MCP servers it started (own sessions: they outlive a killed worker)."""
        with contextlib.suppress(psutil.Error):
            self.servers.update(p.pid for p in psutil.Process(self.proc.pid).children(recursive=True))

    def kill(self) -> None:
        self.note_children()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.note_children()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def status_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in Action.objects.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


class Sweeper:
    """Runs the sweeper (beat's job, every 5 s there) while the test waits, and adds up what it did."""

    def __init__(self) -> None:
        self.totals = {"reclaimed": 0, "requeued": 0, "expired": 0}
        self._last = 0.0

    def while_waiting(self, predicate: Callable[[], bool]) -> Callable[[], bool]:
        """A wait_until predicate that sweeps at most every half second before it looks."""

        def check() -> bool:
            if time.monotonic() - self._last >= 0.5:
                for name, n in actions.sweep().items():
                    self.totals[name] += n
                self._last = time.monotonic()
            return predicate()

        return check


class Enqueuer(threading.Thread):
    """Starts the 300 calls from the CLI's side while the workers drain (and die), at most
    AHEAD of the deliveries."""

    def __init__(self) -> None:
        super().__init__(name="enqueuer", daemon=True)
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            for i in range(ACTIONS):
                while Action.objects.exclude(status=Action.DONE).count() >= AHEAD:
                    if self.stop.wait(0.05):
                        return  # the test is over
                call = start("tasks__add", {"title": f"crash task {i:03d}"})
                assert call.status == "queued", call.status
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self.error = exc
        finally:
            connection.close()  # this thread's own connection to the test database


def drain_with_kills(
    tmp_path: Path, redis_url: str | None, own_redis: OwnRedis | None = None
) -> tuple[list[Worker], Sweeper]:
    """Queue 300 adds while workers drain them; SIGKILL a worker KILLS times (and restart Redis once)."""
    started = time.monotonic()
    data_dir = tmp_path / "tasks-data"
    bundled_tasks(data_dir)
    enqueuer = Enqueuer()
    sweeper = Sweeper()
    workers: list[Worker] = []

    def remaining() -> float:
        return max(1.0, DEADLINE - (time.monotonic() - started))

    def done() -> int:
        return Action.objects.filter(status=Action.DONE).count()

    def wait_for(worker: Worker, predicate: Callable[[], object], what: str, interval: float = 0.05) -> None:
        """wait_until, failing with the action counts and the worker's log and stacks as they
        are when the wait gives up."""
        try:
            wait_until(predicate, timeout=remaining(), interval=interval, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc} ({status_counts()})\n{worker.report()}") from None

    def progress(worker: Worker, at_least: int, or_exit: bool = False) -> None:
        """Wait until `worker` completed `at_least` more actions and is delivering one right now
        (or, with `or_exit`, until it exits)."""
        target = min(ACTIONS - 1, done() + at_least)
        wait_for(
            worker,
            sweeper.while_waiting(
                lambda: (
                    (or_exit and worker.proc.poll() is not None)
                    or (done() >= target and Action.objects.filter(status=Action.LEASED).exists())
                )
            ),
            f"worker {worker.number} to make progress",
        )

    try:
        enqueuer.start()
        for life in range(KILLS + 1):
            worker = Worker(life, tmp_path, redis_url)
            workers.append(worker)
            if life == KILLS:
                break
            progress(worker, PROGRESS_PER_LIFE)
            if own_redis is not None and life == KILLS // 2:
                # Redis dies under a working worker: every queued and reserved wake-up is lost.
                own_redis.kill()
                wait_for(worker, lambda w=worker: "Connection to broker lost" in w.output(), "the worker to notice")
                own_redis.start()
                # The same worker reconnects and goes on (new calls, and the sweeper's re-queues).
                progress(worker, PROGRESS_PER_LIFE, or_exit=True)
                if worker.proc.poll() is not None:
                    # Celery can also give up when the broker comes back (kombu fails while
                    # closing the dead connection, and the worker exits): its supervisor
                    # (`manage.py run`, compose's restart policy) starts it again; so does this.
                    worker = Worker(life + 100, tmp_path, redis_url)
                    workers.append(worker)
                    progress(worker, PROGRESS_PER_LIFE)
            worker.kill()
        final = workers[-1]
        # The last calls wait for deliveries, and those for the sweeper to reclaim what the
        # killed worker held: sweep meanwhile.
        with contextlib.suppress(AssertionError):
            wait_until(sweeper.while_waiting(lambda: not enqueuer.is_alive()), timeout=remaining(), interval=0.1)
        assert not enqueuer.is_alive(), f"the calls were not all started in time ({status_counts()})"
        if enqueuer.error is not None:
            raise enqueuer.error
        wait_for(final, sweeper.while_waiting(lambda: done() == ACTIONS), "every action to be done", interval=0.1)
    finally:
        enqueuer.stop.set()
        enqueuer.join(timeout=60)
        for worker in workers:
            worker.stop()
        servers = {pid for w in workers for pid in w.servers}
        # The killed workers' MCP servers see their stdin close and exit on their own.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not any(psutil.pid_exists(p) for p in servers), timeout=10, what="servers to exit")
        for pid in servers:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()

    assert_one_effect_per_key(data_dir)
    assert_no_lingering_locks()
    return workers, sweeper


def assert_one_effect_per_key(data_dir: Path) -> None:
    assert status_counts() == {Action.DONE: ACTIONS}
    keys = set(Action.objects.values_list("idempotency_key", flat=True))
    assert len(keys) == ACTIONS
    db_file = data_dir / "tasks.sqlite3"
    tasks = server_rows(db_file, "SELECT id, title FROM tasks WHERE title LIKE 'crash task %'")
    recorded = server_rows(db_file, "SELECT key, tool, result_json FROM idempotency_keys")
    # Exactly one task per call, and one recorded key per action key...
    assert len(tasks) == ACTIONS, f"{len(tasks)} tasks for {ACTIONS} actions"
    assert sorted(t for _, t in tasks) == [f"crash task {i:03d}" for i in range(ACTIONS)]
    assert len(recorded) == ACTIONS
    assert {k for k, _, _ in recorded} == keys
    # ...and each key's recorded result is the one task it made.
    assert {json.loads(r)["id"] for _, _, r in recorded} == {i for i, _ in tasks}
    # The host's record agrees with the server's: each call's result is its key's task.
    by_key = {k: json.loads(r)["id"] for k, _, r in recorded}
    for action in Action.objects.select_related("call"):
        assert action.call.status == "succeeded"
        assert action.call.result["structuredContent"]["id"] == by_key[action.idempotency_key]


def assert_the_sweeper_recovered_what_the_dead_workers_held(sweeper: Sweeper) -> None:
    """Each worker was killed mid-delivery: its lease ran out and its message died with it."""
    expired = Action.objects.filter(attempt_log__outcome="lease_expired").distinct().count()
    assert expired >= 1
    assert sweeper.totals["reclaimed"] >= 1
    # Unacknowledged messages of a dead consumer stay invisible in Redis for an hour: a worker is
    # woken for a reclaimed action when the sweeper takes it back (or, later, by its re-queueing).


def assert_no_lingering_locks() -> None:
    """PostgreSQL: the killed workers' sessions released their row locks and transactions."""
    if connection.vendor != "postgresql":
        return  # SQLite has no row locks nor sessions to outlive a process
    with transaction.atomic():
        unlocked = list(Action.objects.select_for_update(skip_locked=True).values_list("pk", flat=True))
    assert len(unlocked) == ACTIONS
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state IN ('idle in transaction', 'idle in transaction (aborted)')"
        )
        assert cursor.fetchone()[0] == 0


@pytest.fixture
def short_lease(settings: Settings) -> None:
    """The test process's lease, like the workers' (PATCHBAY_OUTBOX_LEASE in their environment)."""
    settings.PATCHBAY_OUTBOX_LEASE = LEASE


@pytest.mark.timeout(300)
def test_every_action_is_done_once_although_the_worker_is_killed_again_and_again(
    tmp_path: Path, short_lease: None
) -> None:
    workers, sweeper = drain_with_kills(tmp_path, os.environ.get("REDIS_URL"))

    assert len(workers) == KILLS + 1
    assert all(w.proc.returncode == -signal.SIGKILL for w in workers[:KILLS])
    assert_the_sweeper_recovered_what_the_dead_workers_held(sweeper)


@pytest.mark.timeout(300)
def test_every_action_is_done_once_across_worker_kills_and_a_redis_restart(tmp_path: Path, short_lease: None) -> None:
    redis = OwnRedis()
    redis.start()
    try:
        with broker(redis.url):
            _, sweeper = drain_with_kills(tmp_path, redis.url, own_redis=redis)
    finally:
        redis.close()

    assert_the_sweeper_recovered_what_the_dead_workers_held(sweeper)
