"""How much the connection layer costs over stdio, against the bare SDK client.

Run from the repository root::

    .venv/bin/python bench/bench_stdio.py [--seconds 1] [--rounds 10] [--levels 1,8,64]

One server process per path, one stdio connection each, the same read-only tool:

* ``bare``: ``mcp.Client(StdioServerParameters(...))`` on this script's event loop;
* ``layer async``: ``await pool.acall_tool(...)`` from this script's event loop (the pool
  runs its own loop in a thread, so every call hops there and back);
* ``layer thread``: the blocking ``pool.call_tool(...)`` from plain threads;
* ``layer attached``: ``await pool.acall_tool(...)`` on a pool given this script's own loop
  (``Pool(loop=...)``, how an async host runs it): no hop between threads;
* ``layer in-loop`` (diagnostic, ``--no-diagnostic`` to skip): ``acall_tool`` awaited on the
  pool's own loop, i.e. the layer without the hop between loops.

Callers on another thread or another loop pay for crossing to the loop the connection
lives on, whatever client they use. So the two crossing paths are also compared like for
like, against the bare client run the way such a caller has to run it:

* ``bare from another loop``: a bare ``mcp.Client`` kept on its own loop in a thread,
  awaited from this script's loop through ``asyncio.run_coroutine_threadsafe`` (what
  ``layer async`` does);
* ``bare from a thread``: the same client, waited for from plain threads with
  ``run_coroutine_threadsafe(...).result()`` (what ``layer thread`` does).

Every cell runs ``--seconds`` (or ``--calls`` calls) at a fixed concurrency (that many tasks
or threads calling back to back). The paths are interleaved within each round, in an order
that alternates from round to round, so that drift on a shared machine hits them alike.
Throughput is total calls over total time across rounds; latencies are pooled across rounds.
The ratio is layer / bare: calls per second (below 1 is slower) and p50 / p99 latency
(above 1 is slower).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime as dt
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mcp import Client, StdioServerParameters  # noqa: E402

from hostapp.mcp import Pool, PoolPolicy, ServerConfig  # noqa: E402
from hostapp.mcp.stdio import child_environment  # noqa: E402

BARE = "bare SDK Client"
ASYNC = "layer async"
THREAD = "layer thread"
INLOOP = "layer in-loop"
ATTACHED = "layer attached"
BARE_LOOP = "bare from another loop"
BARE_THREAD = "bare from a thread"

# What each layer path is compared with: the bare client called from the same place.
LIKE_FOR_LIKE = {ASYNC: BARE_LOOP, THREAD: BARE_THREAD, ATTACHED: BARE, INLOOP: BARE}


class BareOnThread:
    """A bare SDK client kept on its own event loop in a thread, as a caller that is not on
    the client's loop has to keep it (the pool does the same for its connections)."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bare-client", daemon=True)
        self.thread.start()
        self.client: Client | None = None
        self._stop: asyncio.Event | None = None
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(params, ready), self.loop)
        ready.result(60)

    async def _serve(self, params: StdioServerParameters, ready: concurrent.futures.Future[None]) -> None:
        # The client is entered and left by one task, as anyio requires.
        try:
            async with Client(params, mode="auto") as client:
                self.client = client
                self._stop = asyncio.Event()
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self._serving.result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@dataclass
class Target:
    label: str
    command: str
    args: tuple[str, ...]
    tool: str
    arguments: dict[str, Any]
    check: Callable[[dict[str, Any]], bool]


def target(name: str, data_dir: str) -> Target:
    if name == "echo":
        return Target(
            "bench/echo_server.py, tool `echo`",
            sys.executable,
            (str(REPO / "bench" / "echo_server.py"),),
            "echo",
            {"text": "hi"},
            lambda r: r["content"][0]["text"] == "hi",
        )
    return Target(
        "servers.mailbox, tool `read` (msg-0001)",
        sys.executable,
        ("-m", "servers.mailbox", "--data-dir", data_dir),
        "read",
        {"message_id": "msg-0001"},
        lambda r: r["structuredContent"]["id"] == "msg-0001",
    )


@dataclass
class Cell:
    calls: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of this process (the client side) spent in the cell
    latencies: list[float] = field(default_factory=list)
    per_round: list[float] = field(default_factory=list)  # calls/s of each round

    def add(self, cpu: float, calls: int, seconds: float, latencies: list[float]) -> None:
        self.cpu += cpu
        self.calls += calls
        self.seconds += seconds
        self.latencies.extend(latencies)
        self.per_round.append(calls / seconds)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


# -- drivers -----------------------------------------------------------------------------------


async def drive_async(call: Callable[[], Awaitable[Any]], concurrency: int, calls: int, seconds: float):
    """`concurrency` tasks calling back to back; returns (calls, elapsed, latencies)."""
    latencies: list[float] = []
    budget = [calls]
    clock = time.perf_counter
    stop_at = clock() + seconds

    async def worker() -> None:
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

    started = clock()
    stop_at = started + seconds
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(latencies), clock() - started, latencies


def drive_threads(call: Callable[[], Any], concurrency: int, calls: int, seconds: float):
    latencies: list[float] = []
    lock = threading.Lock()
    budget = [calls]
    clock = time.perf_counter
    started = clock()
    stop_at = started + seconds

    def worker() -> None:
        mine: list[float] = []
        while True:
            if calls:
                with lock:
                    if budget[0] <= 0:
                        break
                    budget[0] -= 1
            elif clock() >= stop_at:
                break
            t0 = clock()
            call()
            mine.append(clock() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), clock() - started, latencies


# -- the run -----------------------------------------------------------------------------------


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores, {model}; Python {platform.python_version()}; mcp {version('mcp')}; "
        f"{platform.system()} {platform.release()}"
    )


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


async def main(opts: argparse.Namespace) -> int:
    levels = [int(x) for x in opts.levels.split(",")]
    thread_levels = [int(x) for x in opts.thread_levels.split(",") if x]
    data_dir = tempfile.mkdtemp(prefix="bench-stdio-")
    tgt = target(opts.server, data_dir)
    env = child_environment({})  # the same environment for both servers

    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"# {dt.date.today().isoformat()}; {machine()}")
    print(
        f"# server: {tgt.label}; {opts.rounds} rounds x {opts.calls or opts.seconds}{'' if opts.calls else ' s'} per cell"
    )
    print(f"# load average at start: {loadavg()}")

    pool = Pool(PoolPolicy())
    config = ServerConfig("bench", "stdio", command=tgt.command, args=tgt.args, cwd=str(REPO), call_timeout=120.0)
    pool.configure([config])
    attached = Pool(PoolPolicy(), loop=asyncio.get_running_loop())
    await attached.aconfigure([config])
    remote: BareOnThread | None = None
    try:
        attached_status = await attached.aconnect("bench")
        assert attached_status.state == "ready", attached_status
        status = await asyncio.to_thread(pool.connect, "bench")
        if status.state != "ready":
            print(f"the layer could not connect: {status.last_error}", file=sys.stderr)
            return 1

        params = StdioServerParameters(command=tgt.command, args=list(tgt.args), env=env, cwd=str(REPO))
        remote = await asyncio.to_thread(BareOnThread, params)
        async with Client(params, mode="auto") as bare:
            print(
                f"# negotiated: layer {status.protocol_version} ({status.era}), bare {bare.protocol_version}; "
                f"layer server pid {status.pid}"
            )

            async def bare_call() -> None:
                result = await bare.call_tool(tgt.tool, tgt.arguments)
                assert not result.is_error

            async def layer_call() -> None:
                await pool.acall_tool("bench", tgt.tool, tgt.arguments)

            def thread_call() -> None:
                pool.call_tool("bench", tgt.tool, tgt.arguments)

            async def attached_call() -> None:
                await attached.acall_tool("bench", tgt.tool, tgt.arguments)

            assert remote.client is not None
            remote_client = remote.client

            async def bare_loop_call() -> None:
                result = await asyncio.wrap_future(remote.submit(remote_client.call_tool(tgt.tool, tgt.arguments)))
                assert not result.is_error

            def bare_thread_call() -> None:
                result = remote.submit(remote_client.call_tool(tgt.tool, tgt.arguments)).result()
                assert not result.is_error

            # Check, then warm up every path (first calls list tools, compile validators...).
            first = await pool.acall_tool("bench", tgt.tool, tgt.arguments)
            assert tgt.check(first), first
            for _ in range(2):
                await drive_async(bare_call, 8, 300, 0)
                await drive_async(layer_call, 8, 300, 0)
                await drive_async(attached_call, 8, 300, 0)
                await drive_async(bare_loop_call, 8, 300, 0)
                await asyncio.to_thread(drive_threads, thread_call, 1, 100, 0)
                await asyncio.to_thread(drive_threads, bare_thread_call, 1, 100, 0)
                if opts.diagnostic:
                    await asyncio.to_thread(pool.run, drive_async(layer_call, 8, 300, 0))

            plan: list[tuple[str, int]] = []
            for level in levels:
                plan.append((BARE, level))
                plan.append((ASYNC, level))
                plan.append((BARE_LOOP, level))
                plan.append((ATTACHED, level))
                if level in thread_levels:
                    plan.append((THREAD, level))
                    plan.append((BARE_THREAD, level))
                if opts.diagnostic:
                    plan.append((INLOOP, level))
            cells: dict[tuple[str, int], Cell] = {key: Cell() for key in plan}

            for rnd in range(opts.rounds):
                order = plan if rnd % 2 == 0 else list(reversed(plan))
                for path, level in order:
                    cpu0 = time.process_time()
                    if path == BARE:
                        got = await drive_async(bare_call, level, opts.calls, opts.seconds)
                    elif path == ASYNC:
                        got = await drive_async(layer_call, level, opts.calls, opts.seconds)
                    elif path == ATTACHED:
                        got = await drive_async(attached_call, level, opts.calls, opts.seconds)
                    elif path == BARE_LOOP:
                        got = await drive_async(bare_loop_call, level, opts.calls, opts.seconds)
                    elif path == BARE_THREAD:
                        got = await asyncio.to_thread(drive_threads, bare_thread_call, level, opts.calls, opts.seconds)
                    elif path == THREAD:
                        got = await asyncio.to_thread(drive_threads, thread_call, level, opts.calls, opts.seconds)
                    else:
                        got = await asyncio.to_thread(
                            pool.run, drive_async(layer_call, level, opts.calls, opts.seconds), None
                        )
                    cells[(path, level)].add(time.process_time() - cpu0, *got)
                print(f"# round {rnd + 1}/{opts.rounds} done; load average {loadavg()}", file=sys.stderr)

            hops = await measure_hops(pool, opts.rounds) if opts.diagnostic else None

    finally:
        if remote is not None:
            await asyncio.to_thread(remote.close)
        await attached.aclose()
        await asyncio.to_thread(pool.close)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"# load average at end: {loadavg()}")
    print()
    report(cells, levels)
    if hops is not None:
        report_hops(hops)
    return 0


async def _noop() -> None:
    return None


async def measure_hops(pool: Pool, rounds: int, n: int = 5000) -> dict[str, list[tuple[float, float]]]:
    """The cost of crossing into the pool's loop and back with nothing to do there:
    `Pool.arun` (what `acall_tool` does from another loop) and `Pool.run` (what the blocking
    methods do from a thread). Returns per-round (wall µs, CPU µs) per hop."""

    async def via_arun() -> None:
        for _ in range(n):
            await pool.arun(_noop())

    def via_run() -> None:
        for _ in range(n):
            pool.run(_noop())

    out: dict[str, list[tuple[float, float]]] = {"Pool.arun from another loop": [], "Pool.run from a thread": []}
    for _ in range(rounds):
        for label, go in (
            ("Pool.arun from another loop", via_arun),
            ("Pool.run from a thread", lambda: asyncio.to_thread(via_run)),
        ):
            cpu0, t0 = time.process_time(), time.perf_counter()
            await go()
            out[label].append(((time.perf_counter() - t0) / n * 1e6, (time.process_time() - cpu0) / n * 1e6))
    return out


def report_hops(hops: dict[str, list[tuple[float, float]]]) -> None:
    print()
    print("The hop alone (an empty coroutine run on the pool's loop), median of rounds:")
    print()
    print("| hop | wall µs | CPU µs |")
    print("|---|---:|---:|")
    for label, rows in hops.items():
        print(
            f"| {label} | {statistics.median(r[0] for r in rows):.0f} | {statistics.median(r[1] for r in rows):.0f} |"
        )


def report(cells: dict[tuple[str, int], Cell], levels: list[int]) -> None:
    print("| concurrency | path | calls | calls/s | p50 ms | p99 ms | client CPU µs/call |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for (path, level), cell in cells.items():
        print(
            f"| {level} | {path} | {cell.calls} | {cell.rate:.0f} | {cell.pct(0.50):.2f} | {cell.pct(0.99):.2f} "
            f"| {cell.cpu / cell.calls * 1e6:.0f} |"
        )
    print()
    print("Ratios layer / bare at the same concurrency (calls/s: below 1 is slower; latency: above 1 is slower).")
    print("`rounds` is the range (and median) of the per-round calls/s ratios (the layer's round i over bare's).")
    print("First against the bare client on this script's loop; then like for like: each layer path against the")
    print("bare client called from the same place (the same loop, another loop, a plain thread).")
    for title, against in (
        ("against the bare client on this loop", dict.fromkeys(LIKE_FOR_LIKE, BARE)),
        ("like for like", LIKE_FOR_LIKE),
    ):
        print()
        print(f"{title}:")
        print()
        print(
            "| concurrency | path | compared with | calls/s ratio | p50 ratio | p99 ratio | rounds (median) | cost | under 10% |"
        )
        print("|---:|---|---|---:|---:|---:|---|---:|---|")
        for level in levels:
            for path in (ASYNC, ATTACHED, THREAD, INLOOP):
                cell, base = cells.get((path, level)), cells.get((against[path], level))
                if cell is None or base is None:
                    continue
                ratio = cell.rate / base.rate
                per_round = [a / b for a, b in zip(cell.per_round, base.per_round, strict=True)]
                cost = max(1 / statistics.median(per_round) - 1, cell.pct(0.5) / base.pct(0.5) - 1)
                print(
                    f"| {level} | {path} | {against[path]} | {ratio:.3f} | {cell.pct(0.5) / base.pct(0.5):.3f} | "
                    f"{cell.pct(0.99) / base.pct(0.99):.3f} | {min(per_round):.2f}-{max(per_round):.2f} "
                    f"({statistics.median(per_round):.2f}) | {cost * 100:+.1f}% | {'yes' if cost < 0.10 else 'NO'} |"
                )
    print()
    print("cost = the larger of (1 / median per-round calls/s ratio - 1) and (p50 ratio - 1).")
    spread = {level: statistics.pstdev(cells[(BARE, level)].per_round) / cells[(BARE, level)].rate for level in levels}
    print("bare calls/s spread across rounds (stdev/mean): " + ", ".join(f"c={k}: {v:.1%}" for k, v in spread.items()))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each cell (default 1)")
    parser.add_argument("--calls", type=int, default=0, help="a fixed number of calls per cell instead of --seconds")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--levels", default="1,8,64", help="concurrency levels (default 1,8,64)")
    parser.add_argument(
        "--thread-levels", default="1", help="levels at which to run the blocking call_tool from threads (default 1)"
    )
    parser.add_argument("--server", choices=("echo", "mailbox"), default="echo", help="default: echo")
    parser.add_argument(
        "--no-diagnostic", dest="diagnostic", action="store_false", help="skip the in-loop diagnostic path"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
