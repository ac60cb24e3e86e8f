"""The latency floor of forwarding a tool call with the MCP Python SDK under daphne, without Patchbay.

Run from the repository root::

    .venv/bin/python bench/bench_sdk_proxy.py [--seconds 1] [--rounds 6] [--levels 1] [--modes auto,legacy]

bench_gateway.py measures what the agents' endpoint (/mcp) adds to a call of the bundled
mailbox over Streamable HTTP, against a target of ``TARGET_MS`` at p50. Part of that is not
Patchbay's at all: any host built like it (the SDK's Streamable HTTP server app served by
daphne, an SDK ``Client`` to the upstream) pays for one more HTTP hop, the SDK's server-side
request handling and its client-side call. This bench measures that part alone, so that the
endpoint's figure can be read as "floor + Patchbay" and the target judged against what is
reachable at all.

It starts, in one run:

* the bundled mailbox over Streamable HTTP, as bench_gateway.py does
  (``python -m servers.mailbox --transport http --port P --data-dir <tmp>/servers``; the
  server creates and seeds its store there on first use);
* a minimal proxy, ``python -m daphne -b 127.0.0.1 -p N bench_sdk_proxy:app`` (the module
  builds ``app`` only when daphne asks for it): the SDK's low-level ``Server`` with
  ``on_list_tools`` answering the upstream's tools (listed once, at start) and
  ``on_call_tool`` forwarding the call, unchanged, through one long-lived SDK ``Client``
  (``mode="auto"``, like the host's pool) to the mailbox, made on daphne's event loop on the
  first request. Its ``streamable_http_app`` and ``session_manager.run()`` are set up as in
  hostapp/gateway/asgi.py (daphne sends no lifespan events), with ``get_tool_input_schema``
  as in hostapp/gateway/server.py. No tokens, database, ledger, policy or broadcasts.
  Logging as in the host's web process under bench_gateway.py: root logger at WARNING,
  daphne's access log on.

Two paths, the same tool (mailbox ``read`` of ``msg-0001``) and the same bench client as
bench_gateway.py (one long-lived ``mcp.Client`` per path and era, ``mode="auto"`` for the
modern era and ``"legacy"`` for the 2025 handshake era):

* ``direct http``: the client against the mailbox;
* ``proxy > http``: the client against the proxy, which calls the same mailbox.

Cells are interleaved, measured and pooled exactly as in bench_gateway.py (its helpers are
imported from it). The CPU columns are CPU time per call of the bench client, of the proxy
process and of the mailbox process (from /proc, via psutil). ``proxy`` minus ``direct`` is
the floor for bench_gateway.py's ``endpoint > http`` minus ``direct http``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import mcp_types as types
import psutil
from bench_gateway import (
    PYTHON,
    TARGET_MS,
    TOOL_ARGS,
    Cell,
    DirectServer,
    checker,
    cpu_seconds,
    drive,
    free_port,
    http_client,
    loadavg,
    machine,
    stop_process,
    wait_for_port,
)
from mcp import Client
from mcp.server import Server, ServerRequestContext

BENCH = Path(__file__).resolve().parent
UPSTREAM_ENV = "BENCH_SDK_PROXY_UPSTREAM"
UPSTREAM_LINE = "# proxy's upstream client negotiated "
TOOL = "read"

DIRECT = "direct http"
PROXY = "proxy > http"
PATHS = (DIRECT, PROXY)

Scope = dict[str, Any]


# -- the proxy (runs in the daphne process) ----------------------------------------------------


class ProxyApp:
    """The SDK's Streamable HTTP app forwarding every tool call to one upstream; nothing else.

    Started on the first request (daphne sends no lifespan events), as GatewayApp is: a task
    on daphne's loop enters the session manager and the upstream client and holds both open.
    """

    def __init__(self, upstream_url: str) -> None:
        self.upstream_url = upstream_url
        self.tools: dict[str, types.Tool] = {}
        self.client: Client | None = None
        self.failure: BaseException | None = None
        self.server: Server[Any] = Server(
            "sdk-proxy",
            version="0",
            get_tool_input_schema=self.input_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        self.app = self.server.streamable_http_app(streamable_http_path="/mcp")
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self.tools.get(name)
        return tool.input_schema if tool is not None else None

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        assert self.client is not None  # set before the first request gets through
        return await self.client.call_tool(params.name, params.arguments or {})

    async def _ensure_running(self) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="sdk-proxy")
        await self._ready.wait()

    async def _run(self) -> None:
        assert self._ready is not None
        try:
            async with self.server.session_manager.run(), http_client(self.upstream_url, "auto") as client:
                self.tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                self.client = client
                print(f"{UPSTREAM_LINE}{client.protocol_version}", file=sys.stderr, flush=True)
                self._ready.set()
                await asyncio.Event().wait()  # for the process's life
        except Exception as exc:  # boundary: every request is told, and the bench shows the log
            self.failure = exc
            self._ready.set()
            raise

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        await self._ensure_running()
        if self.failure is not None:
            body = f"the proxy could not start: {self.failure!r}".encode()
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def __getattr__(name: str) -> Any:
    """``bench_sdk_proxy:app``: built only when daphne imports it, in the proxy process."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # As the host's web process under bench_gateway.py (PATCHBAY_LOG_LEVEL=WARNING): no INFO
    # line per upstream request; daphne's access log stays on, as it does there.
    logging.getLogger().setLevel(logging.WARNING)
    proxy = ProxyApp(os.environ[UPSTREAM_ENV])
    globals()["app"] = proxy
    return proxy


# -- the processes -----------------------------------------------------------------------------


class ProxyServer:
    """``python -m daphne ... bench_sdk_proxy:app`` in its own process group, logging to a file."""

    def __init__(self, upstream_url: str, log: Path) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, UPSTREAM_ENV: upstream_url, "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "bench_sdk_proxy:app"],
                cwd=BENCH,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-40:])
        return ""

    def upstream_version(self) -> str:
        for line in self.tail().splitlines():
            if line.startswith(UPSTREAM_LINE):
                return line.removeprefix(UPSTREAM_LINE)
        return "unknown"

    def wait_ready(self) -> None:
        wait_for_port(self.proc, self.port, "the proxy (daphne)", self.tail)

    def stop(self) -> None:
        stop_process(self.proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


# -- measuring ---------------------------------------------------------------------------------


async def main(opts: argparse.Namespace) -> int:
    levels = [int(x) for x in opts.levels.split(",")]
    modes = [m for m in opts.modes.split(",") if m]
    work = Path(tempfile.mkdtemp(prefix="bench-sdk-proxy-"))

    print(f"# {' '.join([Path(PYTHON).name, *sys.argv])}")
    print(f"# {dt.date.today().isoformat()}; {machine()}")
    print(f"# {opts.rounds} rounds x {opts.calls or opts.seconds}{'' if opts.calls else ' s'} per cell")
    print(f"# load average at start: {loadavg()}", flush=True)

    direct: DirectServer | None = None
    proxy: ProxyServer | None = None
    try:
        direct = DirectServer(work / "servers")
        direct.wait_ready()
        proxy = ProxyServer(direct.url, work / "proxy.log")
        proxy.wait_ready()
        return await measure(opts, direct, proxy, levels, modes)
    except Exception:
        if proxy is not None and proxy.tail():
            print(f"# proxy log (tail):\n{proxy.tail()}", file=sys.stderr)
        raise
    finally:
        if proxy is not None:
            proxy.stop()
        if direct is not None:
            direct.stop()
        shutil.rmtree(work, ignore_errors=True)


async def measure(
    opts: argparse.Namespace, direct: DirectServer, proxy: ProxyServer, levels: list[int], modes: list[str]
) -> int:
    url = {DIRECT: direct.url, PROXY: proxy.url}
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[tuple[str, str], Client] = {}
        for mode in modes:
            for path in PATHS:
                clients[(mode, path)] = await stack.enter_async_context(http_client(url[path], mode))

        calls: dict[tuple[str, str], list[Callable[[], Awaitable[Any]]]] = {}
        for (mode, path), client in clients.items():
            checker(f"{mode} {path}")(await client.call_tool(TOOL, TOOL_ARGS))  # each answers right

            def bind(c: Client = client) -> Callable[[], Awaitable[Any]]:
                async def call() -> None:
                    await c.call_tool(TOOL, TOOL_ARGS)

                return call

            calls[(mode, path)] = [bind()]

        procs: dict[str, psutil.Process] = {
            "client": psutil.Process(),
            "proxy": psutil.Process(proxy.proc.pid),
            "server": psutil.Process(direct.proc.pid),
        }
        print(
            "# negotiated by the bench clients: "
            + "; ".join(f"{m} {p}: {c.protocol_version}" for (m, p), c in clients.items())
        )
        print(f"{UPSTREAM_LINE}{proxy.upstream_version()} (mode='auto')")
        print(f"# proxy process: pid {procs['proxy'].pid}, {procs['proxy'].num_threads()} threads", flush=True)

        for _ in range(2):  # warm up every path at every level
            for fns in calls.values():
                for level in levels:
                    await drive(fns, level, 0, max(0.3, opts.seconds / 3))
        print(f"# warmed up; load average {loadavg()}", file=sys.stderr, flush=True)

        plan = [(mode, level, path) for mode in modes for level in levels for path in PATHS]
        cells = {key: Cell() for key in plan}
        for rnd in range(opts.rounds):
            for mode, level, path in plan if rnd % 2 == 0 else list(reversed(plan)):
                before = {k: cpu_seconds(p) for k, p in procs.items()}
                n, elapsed, lat = await drive(calls[(mode, path)], level, opts.calls, opts.seconds)
                cell = cells[(mode, level, path)]
                for k, p in procs.items():
                    cell.cpu[k] += cpu_seconds(p) - before[k]
                cell.calls += n
                cell.seconds += elapsed
                cell.latencies.extend(lat)
            print(f"# round {rnd + 1}/{opts.rounds} done; load average {loadavg()}", file=sys.stderr, flush=True)

    if proxy.proc.poll() is not None:
        raise SystemExit(f"the proxy exited during the run:\n{proxy.tail()}")
    print(f"# load average at end: {loadavg()}")
    print()
    report(cells, modes, levels)
    return 0


def report(cells: dict[tuple[str, int, str], Cell], modes: list[str], levels: list[int]) -> None:
    print("| era | concurrency | path | calls | calls/s | p50 ms | p99 ms | CPU µs/call: client | proxy | server |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (mode, level, path), cell in cells.items():
        through = f"{cell.cpu_per_call('proxy'):.0f}" if path == PROXY else "-"
        print(
            f"| {mode} | {level} | {path} | {cell.calls} | {cell.rate:.0f} | {cell.pct(0.5):.2f} | {cell.pct(0.99):.2f} "
            f"| {cell.cpu_per_call('client'):.0f} | {through} | {cell.cpu_per_call('server'):.0f} |"
        )
    print()
    print(
        "Added by the SDK + daphne alone (proxy minus direct): the floor under bench_gateway.py's "
        f"endpoint > http figure, whose target is under {TARGET_MS:g} ms at p50."
    )
    print()
    print(
        "| era | concurrency | added p50 ms | added p99 ms | calls/s ratio | proxy CPU µs/call | left of the target ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        for level in levels:
            a, b = cells[(mode, level, PROXY)], cells[(mode, level, DIRECT)]
            added = a.pct(0.5) - b.pct(0.5)
            print(
                f"| {mode} | {level} | {added:+.2f} | {a.pct(0.99) - b.pct(0.99):+.2f} | {a.rate / b.rate:.2f} "
                f"| {a.cpu_per_call('proxy'):.0f} | {TARGET_MS - added:.2f} |"
            )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each cell (default 1)")
    parser.add_argument("--calls", type=int, default=0, help="a fixed number of calls per cell instead of --seconds")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--levels", default="1", help="concurrency levels (default 1)")
    parser.add_argument("--modes", default="auto,legacy", help="client eras: auto (modern), legacy (default both)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    options = parse()
    signal.signal(signal.SIGTERM, _interrupt)  # the finally blocks stop the servers
    try:
        sys.exit(asyncio.run(main(options)))
    except KeyboardInterrupt as stopped:
        print(f"# interrupted ({stopped or 'SIGINT'}); servers stopped", file=sys.stderr)
        sys.exit(130)
