"""What the agents' endpoint (/mcp) adds to a read-only call, against calling the server directly.

Run from the repository root::

    .venv/bin/python bench/bench_gateway.py [--seconds 1] [--rounds 6] [--levels 1,16] [--modes auto,legacy]

It starts everything it measures, in one run:

* a host: ``manage.py run --port N`` in its own process group, with a fresh data directory
  (SQLite; or the database in ``--database-url`` / ``$DATABASE_URL``, which should be empty),
  its embedded Redis, web (daphne), worker and beat. On its first run the host imports the
  bundled servers (``servers/mcp.json``: mailbox over stdio) and the worker lists their tools;
* the same bundled server over Streamable HTTP, directly:
  ``python -m servers.mailbox --transport http --port P --data-dir <the host's data dir>/servers``,
  which the host is also given as ``mailbox-http`` (``manage.py mcp import``, trusted, refreshed);
* an agent token (``manage.py mcp token create bench --json``).

Four paths, the same tool (mailbox ``read`` of ``msg-0001``) and the same client, the official
SDK's ``mcp.Client`` (one long-lived client per path and era, shared by the concurrent tasks;
``--clients per-worker`` gives each task its own HTTP client):

* ``direct http``: the client against the direct server, tool ``read``;
* ``endpoint > http``: the client against ``http://127.0.0.1:N/mcp`` (``Authorization: Bearer``),
  tool ``mailbox-http__read``: the host calls the same direct server over HTTP;
* ``direct stdio``: the client starting its own ``python -m servers.mailbox`` over stdio, tool ``read``;
* ``endpoint > stdio``: the endpoint, tool ``mailbox__read``: the host's own stdio connection
  (servers/mcp.json), as a fresh install runs it.

``--floor`` adds a fifth: ``sdk proxy > http``, bench_sdk_proxy.py's proxy (the SDK's server
side under plain daphne, forwarding through one SDK client, nothing of Patchbay) in front of
the same direct server, so that what the endpoint adds and what any host built on the SDK and
daphne adds are measured in the same run; their difference is Patchbay's own share.

``endpoint > http`` minus ``direct http`` is the added latency, like for like; ``endpoint >
stdio`` minus ``direct stdio`` the same with the bundled configuration. Every cell runs
``--seconds`` (or ``--calls`` calls) with ``concurrency`` tasks calling back to back. Cells are
interleaved within each round, in an order reversed every other round, after a warm-up, so
drift on a shared machine hits all paths alike; latencies are pooled across rounds, calls/s is
total calls over total time. The CPU columns are CPU time per call of the bench client, of the
host's web process and of the server process that answered (from /proc, via psutil).

``--profile DIR`` afterwards records the web process with py-spy (``pip install py-spy`` into
the venv) while the endpoint is driven at concurrency 1 and prints where its time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TOOL_ARGS = {"message_id": "msg-0001"}

DIRECT_HTTP = "direct http"
ENDPOINT_HTTP = "endpoint > http"
DIRECT_STDIO = "direct stdio"
ENDPOINT_STDIO = "endpoint > stdio"
# With --floor: bench_sdk_proxy.py's proxy (the SDK's server under plain daphne, forwarding
# through one SDK client, nothing of Patchbay) in front of the same direct server.
FLOOR_HTTP = "sdk proxy > http"
PATHS = (DIRECT_HTTP, ENDPOINT_HTTP, DIRECT_STDIO, ENDPOINT_STDIO)
PAIRS = ((ENDPOINT_HTTP, DIRECT_HTTP), (ENDPOINT_STDIO, DIRECT_STDIO), (FLOOR_HTTP, DIRECT_HTTP))
TARGET_MS = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last one
            last = exc
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; last error: {last!r}")


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores, {model}; Python {platform.python_version()}; mcp {version('mcp')}; "
        f"Django {version('Django')}; daphne {version('daphne')}; {platform.system()} {platform.release()}"
    )


# -- the processes -----------------------------------------------------------------------------


class Host:
    """`manage.py run` with its own data directory, as a user starts it."""

    def __init__(
        self, data_dir: Path, database_url: str | None, *args: str, redis_url: str | None = None, ports: int = 1
    ) -> None:
        """`args` go to `manage.py run`; `ports` free ports in a row are found (`--web N`)."""
        self.data_dir = data_dir
        self.port = free_port()
        while not all(port_free(self.port + i) for i in range(1, ports)):
            self.port = free_port()
        self.lines: list[str] = []
        self.env = dict(os.environ)
        for key in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY"):
            self.env.pop(key, None)
        if database_url:
            self.env["DATABASE_URL"] = database_url
        if redis_url:
            self.env["REDIS_URL"] = redis_url
        self.env.update(
            PATCHBAY_DATA_DIR=str(data_dir),
            PATCHBAY_LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            DJANGO_SETTINGS_MODULE="hostapp.settings",
        )
        self.proc = subprocess.Popen(
            [PYTHON, "manage.py", "run", "--port", str(self.port), *args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self) -> str:
        return "".join(self.lines[-40:])

    def manage(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [PYTHON, "manage.py", "mcp", *args],
            cwd=REPO,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"mcp {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def wait_ready(self) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise SystemExit(f"manage.py run exited early:\n{self.tail()}")
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        wait_until(up, 180, f"the web process\n{self.tail()}")

        def listed() -> bool:
            tools = json.loads(self.manage("tools", "--json", "--server", "mailbox"))
            return any(t["name"] == "mailbox__read" and t["status"] == "active" for t in tools)

        wait_until(listed, 180, "the worker to list the bundled servers' tools", interval=1.0)

    def web(self) -> psutil.Process:
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "hostapp.core.web" in " ".join(child.cmdline()):
                    return child
        raise RuntimeError("no web process (hostapp.core.web) in the host's group")

    def web_child(self, needle: str) -> psutil.Process:
        """The stdio server the web process itself started (not the worker's)."""
        for child in self.web().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if needle in " ".join(child.cmdline()):
                    return child
        raise RuntimeError(f"the web process has no child running {needle}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class DirectServer:
    """The bundled mailbox over Streamable HTTP, on the host's server data."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "servers.mailbox", "--transport", "http", "--port", str(self.port)]
            + ["--data-dir", str(data_dir)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def wait_ready(self) -> None:
        wait_for_port(self.proc, self.port, "the direct mailbox server")

    def stop(self) -> None:
        stop_process(self.proc)


def wait_for_port(proc: subprocess.Popen[bytes], port: int, what: str, tail: Callable[[], str] = str) -> None:
    """Until `proc` accepts connections on `port`; exits the bench if it dies first."""

    def up() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited early\n{tail()}".rstrip())
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    wait_until(up, 60, what)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Cell:
    calls: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    def cpu_per_call(self, who: str) -> float:
        return self.cpu.get(who, 0.0) / self.calls * 1e6 if self.calls else 0.0


def cpu_seconds(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


async def drive(calls_of: list[Callable[[], Awaitable[Any]]], concurrency: int, calls: int, seconds: float):
    """`concurrency` tasks calling back to back (task i uses calls_of[i % len]); (calls, elapsed, latencies)."""
    latencies: list[float] = []
    budget = [calls]
    clock = time.perf_counter
    started = clock()
    stop_at = started + seconds

    async def worker(call: Callable[[], Awaitable[Any]]) -> None:
        while True:
            if calls:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            elif clock() >= stop_at:
                return
            t0 = clock()
            await call()
            latencies.append(clock() - t0)

    await asyncio.gather(*(worker(calls_of[i % len(calls_of)]) for i in range(concurrency)))
    return len(latencies), clock() - started, latencies


@contextlib.asynccontextmanager
async def http_client(url: str, mode: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def checker(path: str) -> Callable[[Any], None]:
    def check(result: Any) -> None:
        if result.is_error or (result.structured_content or {}).get("id") != "msg-0001":
            raise RuntimeError(f"{path}: unexpected result {result!r}")

    return check


async def main(opts: argparse.Namespace) -> int:
    levels = [int(x) for x in opts.levels.split(",")]
    modes = [m for m in opts.modes.split(",") if m]
    paths = [p for p in PATHS if opts.stdio or "stdio" not in p]
    if opts.floor:
        paths.insert(paths.index(ENDPOINT_HTTP) + 1, FLOOR_HTTP)
    database_url = opts.database_url or os.environ.get("DATABASE_URL") or None
    data_dir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))

    print(f"# {' '.join([Path(PYTHON).name, *sys.argv])}")
    print(f"# {dt.date.today().isoformat()}; {machine()}")
    print(
        f"# database: {'PostgreSQL (DATABASE_URL)' if database_url and database_url.startswith('postgres') else 'SQLite (default)'}; "
        f"{opts.rounds} rounds x {opts.calls or opts.seconds}{'' if opts.calls else ' s'} per cell; clients: {opts.clients}"
    )
    print(f"# load average at start: {loadavg()}", flush=True)

    host = Host(data_dir, database_url)
    direct = DirectServer(data_dir / "servers")
    floor = None
    try:
        t0 = time.monotonic()
        direct.wait_ready()
        if opts.floor:
            from bench_sdk_proxy import ProxyServer  # it imports this module's helpers

            floor = ProxyServer(direct.url, data_dir / "sdk-proxy.log")
            floor.wait_ready()
        host.wait_ready()
        token = json.loads(host.manage("token", "create", "bench", "--json"))["token"]
        config = {"mcpServers": {"mailbox-http": {"url": direct.url, "trusted": True}}}
        host.manage("import", "-", "--refresh", stdin=json.dumps(config))
        print(f"# host ready in {time.monotonic() - t0:.0f}s (data dir {data_dir})", file=sys.stderr, flush=True)
        return await measure(opts, host, direct, token, levels, modes, paths, data_dir, floor)
    finally:
        host.stop()
        if floor is not None:
            floor.stop()
        direct.stop()
        if not opts.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


async def measure(
    opts: argparse.Namespace,
    host: Host,
    direct: DirectServer,
    token: str,
    levels: list[int],
    modes: list[str],
    paths: list[str],
    data_dir: Path,
    floor: Any = None,
) -> int:
    endpoint = f"{host.url}/mcp"
    stdio = StdioServerParameters(
        command=PYTHON,
        args=["-m", "servers.mailbox", "--data-dir", str(data_dir / "servers")],
        cwd=str(REPO),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    tool = {
        DIRECT_HTTP: "read",
        ENDPOINT_HTTP: "mailbox-http__read",
        FLOOR_HTTP: "read",
        DIRECT_STDIO: "read",
        ENDPOINT_STDIO: "mailbox__read",
    }
    n_clients = max(levels) if opts.clients == "per-worker" else 1

    async with contextlib.AsyncExitStack() as stack:
        clients: dict[tuple[str, str], list[Client]] = {}
        versions: dict[tuple[str, str], str] = {}
        stdio_server: dict[str, psutil.Process | None] = {}  # per era: the process the bench's stdio client started
        me = psutil.Process()
        for mode in modes:
            for path in paths:
                many = 1 if path == DIRECT_STDIO else n_clients  # one stdio client = one server process
                made = []
                for _ in range(many):
                    if path == DIRECT_HTTP:
                        cm = http_client(direct.url, mode)
                    elif path == DIRECT_STDIO:
                        cm = Client(stdio, mode=mode)
                    elif path == FLOOR_HTTP:
                        cm = http_client(floor.url, mode)
                    else:
                        cm = http_client(endpoint, mode, token)
                    before = {c.pid for c in me.children()}
                    made.append(await stack.enter_async_context(cm))
                    if path == DIRECT_STDIO:
                        started = [c for c in me.children() if c.pid not in before]
                        stdio_server[mode] = started[0] if started else None
                clients[(mode, path)] = made
                versions[(mode, path)] = made[0].protocol_version

        # The endpoint must list mailbox-http__read (its catalog cache follows changes).
        async def listed() -> bool:
            names = {t.name for t in (await clients[(modes[0], ENDPOINT_HTTP)][0].list_tools()).tools}
            return tool[ENDPOINT_HTTP] in names

        deadline = time.monotonic() + 60
        while not await listed():
            if time.monotonic() > deadline:
                raise SystemExit("the endpoint never listed mailbox-http__read")
            await asyncio.sleep(0.5)

        calls: dict[tuple[str, str], list[Callable[[], Awaitable[Any]]]] = {}
        for (mode, path), made in clients.items():
            check = checker(f"{mode} {path}")
            for c in made:
                check(await c.call_tool(tool[path], TOOL_ARGS))  # each answers right

            def bind(c: Client, name: str = tool[path]) -> Callable[[], Awaitable[Any]]:
                async def call() -> None:
                    await c.call_tool(name, TOOL_ARGS)

                return call

            calls[(mode, path)] = [bind(c) for c in made]

        web = host.web()
        procs: dict[str, psutil.Process | None] = {
            "client": psutil.Process(),
            "web": web,
            "direct http server": psutil.Process(direct.proc.pid),
            "host's stdio server": None,
            "sdk proxy": psutil.Process(floor.proc.pid) if floor is not None else None,
        }
        with contextlib.suppress(RuntimeError):
            procs["host's stdio server"] = host.web_child("servers.mailbox")
        server_of = {
            DIRECT_HTTP: "direct http server",
            ENDPOINT_HTTP: "direct http server",
            ENDPOINT_STDIO: "host's stdio server",
            FLOOR_HTTP: "direct http server",
        }

        print(
            "# negotiated by the bench clients: "
            + "; ".join(f"{m} {p}: {v}" for (m, p), v in versions.items() if p in (DIRECT_HTTP, ENDPOINT_HTTP))
        )
        print(f"# web process: pid {web.pid}, {web.num_threads()} threads", flush=True)

        # Warm up every path at every level.
        for _ in range(2):
            for fns in calls.values():
                for level in levels:
                    await drive(fns, level, 0, max(0.3, opts.seconds / 3))
        print(f"# warmed up; load average {loadavg()}", file=sys.stderr, flush=True)

        plan = [(mode, level, path) for mode in modes for level in levels for path in paths]
        cells = {key: Cell() for key in plan}
        for rnd in range(opts.rounds):
            for mode, level, path in plan if rnd % 2 == 0 else list(reversed(plan)):
                server = stdio_server.get(mode) if path == DIRECT_STDIO else procs[server_of[path]]
                # "web" is what forwards the call: the host's web process, or the SDK proxy.
                web_of = procs["sdk proxy"] if path == FLOOR_HTTP else procs["web"]
                who = {"client": procs["client"], "web": web_of, "server": server}
                before = {k: cpu_seconds(p) for k, p in who.items()}
                n, elapsed, lat = await drive(calls[(mode, path)], level, opts.calls, opts.seconds)
                cell = cells[(mode, level, path)]
                for k, p in who.items():
                    cell.cpu[k] += cpu_seconds(p) - before[k]
                cell.calls += n
                cell.seconds += elapsed
                cell.latencies.extend(lat)
            print(f"# round {rnd + 1}/{opts.rounds} done; load average {loadavg()}", file=sys.stderr, flush=True)

        print(f"# load average at end: {loadavg()}; web process threads: {web.num_threads()}")
        print(f"# ledger: {ledger_summary(host)}")
        print()
        report(cells, modes, levels, paths)

        if opts.profile:
            await profile(opts, web, calls, modes, data_dir)
        if opts.breakdown:
            print()
            print(
                f"Breakdown of the endpoint's per-call steps ({opts.breakdown} times each, in a separate process, no other load from the bench):"
            )
            print()
            sys.stdout.flush()
            await asyncio.to_thread(
                subprocess.run,
                [PYTHON, __file__, "--_breakdown", str(opts.breakdown), "--_token", token],
                cwd=REPO,
                env=host.env,
                check=False,
                timeout=600,
            )
    return 0


def ledger_summary(host: Host) -> str:
    """How many calls the ledger holds, and the upstream time it recorded (duration_ms) of the latest."""
    try:
        rows = json.loads(host.manage("calls", "--json", "--limit", "2000"))
    except Exception as exc:  # noqa: BLE001 - informative only
        return f"n/a ({exc})"
    if not rows:
        return "0 rows"
    parts = [f"{rows[0]['call_id']} rows"]
    for name in sorted({r["tool"] for r in rows}):
        took = [r["duration_ms"] for r in rows if r["tool"] == name and r["duration_ms"] is not None]
        if took:
            parts.append(f"{name}: median upstream {statistics.median(took):.2f} ms over the last {len(took)}")
        bad = [r for r in rows if r["tool"] == name and r["status"] != "succeeded"]
        if bad:
            parts.append(f"{name}: {len(bad)} not succeeded ({bad[0]['status']}: {bad[0]['error']})")
    return "; ".join(parts)


def report(cells: dict[tuple[str, int, str], Cell], modes: list[str], levels: list[int], paths: list[str]) -> None:
    print("| era | concurrency | path | calls | calls/s | p50 ms | p99 ms | CPU µs/call: client | web | server |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (mode, level, path), cell in cells.items():
        web = f"{cell.cpu_per_call('web'):.0f}" if "> " in path else "-"
        print(
            f"| {mode} | {level} | {path} | {cell.calls} | {cell.rate:.0f} | {cell.pct(0.5):.2f} | {cell.pct(0.99):.2f} "
            f"| {cell.cpu_per_call('client'):.0f} | {web} | {cell.cpu_per_call('server'):.0f} |"
        )
    print()
    print(
        f"Added by the endpoint (endpoint minus direct, same upstream transport; with --floor, the SDK proxy too); target: under {TARGET_MS:g} ms at p50."
    )
    print()
    print("| era | concurrency | path | added p50 ms | added p99 ms | calls/s ratio | web CPU µs/call | p50 target |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for mode in modes:
        for level in levels:
            for through, base in PAIRS:
                if through not in paths:
                    continue
                a, b = cells[(mode, level, through)], cells[(mode, level, base)]
                added = a.pct(0.5) - b.pct(0.5)
                print(
                    f"| {mode} | {level} | {through} | {added:+.2f} | {a.pct(0.99) - b.pct(0.99):+.2f} "
                    f"| {a.rate / b.rate:.2f} | {a.cpu_per_call('web'):.0f} | {'met' if added < TARGET_MS else 'NOT met'} |"
                )
    if FLOOR_HTTP in paths:
        print()
        print(
            "The endpoint against the floor, same run: endpoint > http minus sdk proxy > http (the SDK and daphne alone)."
        )
        print()
        print(
            "| era | concurrency | endpoint added p50 ms | floor added p50 ms | Patchbay's own p50 ms | web CPU µs/call: endpoint | floor |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for mode in modes:
            for level in levels:
                e, f, d = (cells[(mode, level, p)] for p in (ENDPOINT_HTTP, FLOOR_HTTP, DIRECT_HTTP))
                print(
                    f"| {mode} | {level} | {e.pct(0.5) - d.pct(0.5):+.2f} | {f.pct(0.5) - d.pct(0.5):+.2f} "
                    f"| {e.pct(0.5) - f.pct(0.5):+.2f} | {e.cpu_per_call('web'):.0f} | {f.cpu_per_call('web'):.0f} |"
                )


# -- profiling ---------------------------------------------------------------------------------


async def profile(
    opts: argparse.Namespace,
    web: psutil.Process,
    calls: dict[tuple[str, str], list[Callable[[], Awaitable[Any]]]],
    modes: list[str],
    data_dir: Path,
) -> None:
    py_spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    if not Path(py_spy).exists():
        print("\n(py-spy is not installed: pip install py-spy)")
        return
    out_dir = Path(opts.profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    seconds = max(5.0, opts.seconds * 5)
    for mode in modes:
        for level in (1, 16):
            name = f"web-{mode}-c{level}"
            raw = out_dir / f"{name}.txt"
            rec = subprocess.Popen(
                [py_spy, "record", "--pid", str(web.pid), "--format", "raw", "--rate", "250"]
                + ["--duration", str(int(seconds) + 1), "--nonblocking", "--output", str(raw)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            await asyncio.sleep(0.5)
            n, elapsed, _ = await drive(calls[(mode, ENDPOINT_HTTP)], level, 0, seconds)
            await asyncio.to_thread(rec.wait)
            print(f"\nProfile of the web process, {mode}, concurrency {level}, {n / elapsed:.0f} calls/s: {raw}")
            if raw.exists():
                summarize(raw)
            else:
                print(rec.stderr.read() if rec.stderr else "no output")


# Where a busy sample of the web process is spent: (label, substring of a frame), inclusive.
PROFILE_PARTS = (
    ("the /mcp app (GatewayApp.__call__, all of it)", "GatewayApp.__call__ (hostapp/gateway/asgi.py"),
    ("token check (asgi._authenticate)", "_authenticate (hostapp/gateway/asgi.py"),
    ("Gateway.call_tool (on the loop)", "Gateway.call_tool (hostapp/gateway/server.py"),
    ("Gateway.list_tools (the modern path lists per call)", "Gateway.list_tools (hostapp/gateway/server.py"),
    ("_agent_row", "_agent_row (hostapp/gateway/server.py"),
    ("start_call (in its thread, all of it)", "start_call (hostapp/calls/actions.py"),
    ("- validate_arguments", "validate_arguments (hostapp/calls/actions.py"),
    ("- decide (policy)", "decide (hostapp/calls/policy.py"),
    ("- run_now (waits for the pool)", "run_now (hostapp/calls/actions.py"),
    ("- the outcome's move (life.finish)", "finish (hostapp/calls/life.py"),
    ("broadcast, thread side (events._send)", "_send (hostapp/core/events.py"),
    ("the row after the answer (record_ran)", "record_ran (hostapp/calls/actions.py"),
    ("Redis group_send (on the loop)", "RedisChannelLayer.group_send"),
    ("Redis receive (the endpoint hears every call.changed)", "RedisChannelLayer.receive"),
    ("Django ORM (django/db)", "django/db/"),
    ("- SQLite execute", "SQLiteCursorWrapper.execute"),
    ("- new database connections", "get_new_connection"),
    ("the pool's loop (SDK client to the upstream)", "Pool._run_loop"),
    ("the SDK server (mcp/server)", "mcp/server/"),
    ("daphne's HTTP handling (http_protocol, access log)", ("daphne/http_protocol", "daphne/access", "daphne/ws_")),
    ("thread: the main event loop", "Server.run (daphne/server.py"),
    ("thread: sync_to_async executor threads", "_WorkItem.run (concurrent/futures/thread.py"),
    ("- asyncio call_soon_threadsafe (waking the loop)", "call_soon_threadsafe"),
    ("pydantic", "pydantic/"),
    ("jsonschema", "jsonschema/"),
)
IDLE_LEAVES = (
    "select (selectors.py",
    "_worker (concurrent/futures/thread.py:81)",
    "wait (threading.py",
    "_wait_for_tstate_lock",
    # A batcher thread (live events, pool states) waiting on its queue: a C call, so the
    # leaf py-spy shows is the Python frame that waits.
    "_next (hostapp/core/batching.py",
    "_collect (hostapp/core/batching.py",
)


def summarize(raw: Path) -> None:
    """Share of the busy samples (idle waits left out) that pass through each part."""
    total = 0
    parts: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if any(leaf in frames[-1] for leaf in IDLE_LEAVES):
            continue
        n = int(count)
        total += n
        leaves[frames[-1]] += n
        for label, needle in PROFILE_PARTS:
            needles = needle if isinstance(needle, tuple) else (needle,)
            if any(x in f for f in frames for x in needles):
                parts[label] += n
    if not total:
        return
    print(f"busy samples: {total}")
    print("| part (inclusive) | share of busy samples |")
    print("|---|---:|")
    for label, _ in PROFILE_PARTS:
        print(f"| {label} | {parts[label] / total:.1%} |")
    print("top leaves: " + "; ".join(f"{k} {v / total:.1%}" for k, v in leaves.most_common(8)))


# -- the breakdown: each step of an endpoint call, timed alone, in the host's environment -----------


def breakdown(n: int, token: str) -> int:
    """Times (wall and CPU, median µs) of what the endpoint does per read-only call.

    Runs in its own process against the running host's database and Redis; its pool
    connects to the same upstream (mailbox-http). The steps are the ones of
    `GatewayApp.__call__`, `Gateway.call_tool`, `calls.actions.start_call` and `run_now`,
    each run as the web process runs it: in a `sync_to_async(thread_sensitive=False)`
    thread under a running event loop (so a broadcast's `async_to_sync` goes back to it).
    """
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from asgiref.sync import async_to_sync, sync_to_async
    from django.db import close_old_connections, connection
    from django.utils import timezone

    from hostapp.calls import actions, life
    from hostapp.calls.models import Call
    from hostapp.calls.policy import decide
    from hostapp.catalog.models import Tool
    from hostapp.catalog.pool import close_pool, pool_for
    from hostapp.core import events
    from hostapp.gateway import tokens
    from hostapp.gateway.models import AgentToken

    name = "mailbox-http__read"
    rows: list[tuple[str, float, float]] = []

    def steps() -> None:
        agent = tokens.authenticate(token)
        assert agent is not None
        requester = actions.Requester(Call.AGENT, agent.name, agent=agent)
        tool = Tool.objects.select_related("server").get(exposed_name=name)
        pool = pool_for(tool.server)
        holder: list[Any] = [None]

        def timed(label: str, fn: Callable[[], Any]) -> None:
            fn()
            walls, cpus = [], []
            for _ in range(n):
                c0, t0 = time.thread_time(), time.perf_counter()
                fn()
                walls.append(time.perf_counter() - t0)
                cpus.append(time.thread_time() - c0)
            rows.append((label, statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6))

        def auth_like_the_endpoint() -> None:
            tokens.authenticate(token)
            close_old_connections()

        def reconnect() -> None:
            connection.close()
            connection.ensure_connection()

        def call_row() -> None:
            holder[0] = life.open_call(actions.new_call(tool, decide(tool), requester, TOOL_ARGS, timezone.now()))

        def outcome() -> None:
            call = holder[0]
            call.status = Call.RUNNING  # measured again and again from the same row
            Call.objects.filter(pk=call.pk).update(status=Call.RUNNING)
            life.finish(call, {"content": []}, None, 0.001)

        def upstream() -> None:
            pool.call_tool(tool.server.name, tool.original_name, TOOL_ARGS)

        db = connection.settings_dict
        print(f"database: {db['ENGINE'].rsplit('.', 1)[-1]}, CONN_MAX_AGE={db.get('CONN_MAX_AGE')}")
        timed("token check as the endpoint does it (authenticate + close_old_connections)", auth_like_the_endpoint)
        timed("- of which a new database connection (connect + init_command)", reconnect)
        timed("- of which the token query (connection kept)", lambda: tokens.authenticate(token))
        timed("AgentToken row (_agent_row)", lambda: AgentToken.objects.get(pk=agent.pk))
        timed(
            "start_call: Tool lookup (select_related)",
            lambda: Tool.objects.select_related("server").filter(exposed_name=name).first(),
        )
        timed(
            "start_call: validate_arguments (check_schema + validate)",
            lambda: actions.validate_arguments(tool.input_schema, TOOL_ARGS),
        )
        timed("start_call: decide (policy: rules query)", lambda: decide(tool))
        timed("start_call: Call + CallEvent rows, one transaction (life.open_call)", call_row)
        timed("the outcome: a move + CallEvent, one transaction (life.finish; one reset UPDATE more)", outcome)
        timed("one broadcast (_send: async_to_sync to the loop, Redis group_send)", lambda: events._send("bench", {}))
        timed("run_now's pool.call_tool (hop to the pool's loop, upstream HTTP call)", upstream)
        timed(
            "whole start_call (the above, 2 broadcasts, run_now)",
            lambda: actions.start_call(name, TOOL_ARGS, requester),
        )
        close_old_connections()

    async def measure_all() -> None:
        def noop() -> None:
            return None

        async def anoop() -> None:
            return None

        def nested() -> None:
            async_to_sync(anoop)()

        for label, make in (
            (
                "hop: await sync_to_async(f, thread_sensitive=False)()",
                lambda: sync_to_async(noop, thread_sensitive=False)(),
            ),
            (
                "hop: the same, calling async_to_sync(g)() inside",
                lambda: sync_to_async(nested, thread_sensitive=False)(),
            ),
        ):
            walls = []
            for _ in range(n):
                t0 = time.perf_counter()
                await make()
                walls.append(time.perf_counter() - t0)
            rows.append((label, statistics.median(walls) * 1e6, float("nan")))
        await sync_to_async(steps, thread_sensitive=False)()

    asyncio.run(measure_all())
    print("| step | wall µs (median) | CPU µs (median, its thread) |")
    print("|---|---:|---:|")
    for label, wall, cpu in rows:
        print(f"| {label} | {wall:.0f} | {'-' if cpu != cpu else f'{cpu:.0f}'} |")
    close_pool()
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each cell (default 1)")
    parser.add_argument("--calls", type=int, default=0, help="a fixed number of calls per cell instead of --seconds")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--levels", default="1,16", help="concurrency levels (default 1,16)")
    parser.add_argument("--modes", default="auto,legacy", help="client eras: auto (modern), legacy (default both)")
    parser.add_argument("--clients", choices=("shared", "per-worker"), default="shared")
    parser.add_argument("--no-stdio", dest="stdio", action="store_false", help="skip the stdio pair")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure bench_sdk_proxy.py's proxy (the SDK under daphne, no Patchbay) in front of the direct server",
    )
    parser.add_argument("--database-url", help="the host's database (default: $DATABASE_URL, else SQLite)")
    parser.add_argument("--profile", metavar="DIR", help="then record the web process with py-spy into DIR")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument(
        "--breakdown", type=int, default=0, metavar="N", help="then time each step of an endpoint call N times"
    )
    parser.add_argument("--_breakdown", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--_token", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    options = parse()
    if options._breakdown:
        sys.exit(breakdown(options._breakdown, options._token))
    sys.exit(asyncio.run(main(options)))
