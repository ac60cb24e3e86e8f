"""Read-only calls per second through /mcp with one and with two web processes, in one run.

Run from the repository root (PostgreSQL and Redis up, as several processes need)::

    .venv/bin/python bench/bench_web_processes.py [--seconds 5] [--rounds 4] [--concurrency 16,32]
        [--database-url postgres://postgres@127.0.0.1:5432/test] [--redis-url redis://127.0.0.1:6379/12]

It starts everything it measures:

* a host: ``manage.py run --web 2 --workers 1`` on a PostgreSQL database it creates on the
  server of ``--database-url`` (dropped afterwards) and on a Redis database it empties; the
  bundled servers imported on the first run, the worker lists their tools;
* the bundled mailbox server over Streamable HTTP, directly (the floor: no host at all):
  ``python -m servers.mailbox --transport http``;
* an agent token.

Three cells, the same tool (mailbox ``read`` of ``msg-0001``), the official SDK client in the
2026-07-28 era (stateless: any web process serves any request), ``concurrency`` tasks calling
back to back, one client per web process shared by its tasks:

* ``direct``: the client against the direct server (what the machine does without a host);
* ``1 web``: every task against web 1 (web 2 idles);
* ``2 web``: half the tasks against web 1, half against web 2.

Cells are interleaved within each round, in an order reversed every other round. The CPU
columns are CPU seconds per 1,000 calls of each part (the bench client, each web process,
the stdio servers they started or the direct server, the worker, PostgreSQL's backends,
Redis) and their sum, from /proc via psutil: on a machine with few cores they say what the
calls per second are limited by (cores x 1,000 / the sum is the ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import bench_gateway
import httpx
import psutil
import psycopg
import redis
from bench_gateway import cpu_seconds, drive, free_port, http_client, loadavg, machine, port_free, wait_until

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TOOL_ARGS = {"message_id": "msg-0001"}
CELLS = ("direct", "1 web", "2 web")


class Host(bench_gateway.Host):
    """`manage.py run --web 2 --workers 1` on its own data directory, database and Redis."""

    def __init__(self, data_dir: Path, database_url: str, redis_url: str) -> None:
        super().__init__(data_dir, database_url, "--web", "2", "--workers", "1", redis_url=redis_url, ports=2)

    def url_of(self, number: int) -> str:
        return f"http://127.0.0.1:{self.port + number - 1}"

    def wait_ready(self) -> None:
        wait_until(lambda: httpx.get(f"{self.url_of(2)}/healthz", timeout=2).status_code == 200, 180, "web 2")
        super().wait_ready()  # web 1, and the bundled servers listed

    def parts(self) -> dict[str, list[psutil.Process]]:
        """The host's processes by part: each web process, the stdio servers they started,
        the worker with its own."""
        found: dict[str, list[psutil.Process]] = {"web 1": [], "web 2": [], "servers": [], "worker": []}
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(child.cmdline())
                if "hostapp.core.web" in cmd and "lifeline" not in cmd:
                    found["web 1" if f"-p {self.port} " in cmd + " " else "web 2"].append(child)
                    found["servers"] += child.children(recursive=True)
                elif "hostapp worker" in cmd and "lifeline" not in cmd:
                    found["worker"] += [child, *child.children(recursive=True)]
        return found


def cpu(processes: list[psutil.Process]) -> float:
    return sum(cpu_seconds(proc) for proc in processes)


def postgres_backends(database: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (proc.info["name"] or "").startswith("postgres") and database in " ".join(proc.info["cmdline"] or []):
                out.append(proc)
    return out


def redis_servers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("redis-server")]


@contextlib.contextmanager
def own_database(server_url: str) -> Any:
    name = f"pb_bench_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(server_url)
    admin = urlunsplit(parts._replace(scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}")), name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check(result: Any) -> None:
    if result.is_error or (result.structured_content or {}).get("id") != "msg-0001":
        raise RuntimeError(f"unexpected result {result!r}")


async def measure(
    opts: argparse.Namespace, host: Host, token: str, direct_url: str, database: str, direct_server: psutil.Process
) -> None:
    levels = [int(x) for x in opts.concurrency.split(",")]
    async with contextlib.AsyncExitStack() as stack:
        direct = await stack.enter_async_context(http_client(direct_url, "auto"))
        web1 = await stack.enter_async_context(http_client(f"{host.url_of(1)}/mcp", "auto", token))
        web2 = await stack.enter_async_context(http_client(f"{host.url_of(2)}/mcp", "auto", token))

        def caller(client: Any, tool: str) -> Callable[[], Any]:
            async def call() -> None:
                check(await client.call_tool(tool, TOOL_ARGS))

            return call

        paths = {
            "direct": [caller(direct, "read")],
            "1 web": [caller(web1, "mailbox__read")],
            "2 web": [caller(web1, "mailbox__read"), caller(web2, "mailbox__read")],
        }
        # Warm-up: every path, every connection (the web processes start their stdio servers).
        for calls in paths.values():
            await drive(calls, 4, 40, 0)

        totals: dict[tuple[str, int], list[float]] = {}
        cpu_of: dict[tuple[str, int], dict[str, float]] = {}
        me = psutil.Process()
        for round_no in range(opts.rounds):
            order = list(CELLS) if round_no % 2 == 0 else list(reversed(CELLS))
            for level in levels:
                for cell in order:
                    parts = host.parts()
                    groups = {
                        "client": [me],
                        "web 1": parts["web 1"],
                        "web 2": parts["web 2"],
                        "servers": [*parts["servers"], direct_server],
                        "worker": parts["worker"],
                        "postgres": postgres_backends(database),
                        "redis": redis_servers(),
                    }
                    before = {k: cpu(v) for k, v in groups.items()}
                    calls, elapsed, _ = await drive(paths[cell], level, 0, opts.seconds)
                    after = {k: cpu(v) for k, v in groups.items()}
                    sums = totals.setdefault((cell, level), [0.0, 0.0])
                    sums[0] += calls
                    sums[1] += elapsed
                    spent = cpu_of.setdefault((cell, level), {k: 0.0 for k in groups})
                    for k in groups:
                        spent[k] += after[k] - before[k]

    print(f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {machine()}; load {loadavg()}")
    print(f"{opts.rounds} rounds x {opts.seconds:g}s per cell; 2026-07-28 era; mailbox read\n")
    head = f"{'cell':<8} {'c':>3} {'calls/s':>8} {'x direct':>8} {'x 1 web':>8}"
    head += "   CPU s per 1,000 calls: client / web 1 / web 2 / servers / worker / postgres / redis; sum"
    print(head)
    for level in levels:
        rate = {cell: totals[(cell, level)][0] / totals[(cell, level)][1] for cell in CELLS}
        for cell in CELLS:
            calls = totals[(cell, level)][0]
            spent = cpu_of[(cell, level)]
            per = " / ".join(f"{spent[k] / calls * 1000:.2f}" for k in spent)
            per += f"; {sum(spent.values()) / calls * 1000:.2f}"
            print(
                f"{cell:<8} {level:>3} {rate[cell]:>8.1f} {rate[cell] / rate['direct']:>8.2f} "
                f"{rate[cell] / rate['1 web']:>8.2f}   {per}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", default="16,32")
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/test"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    opts = parser.parse_args()

    flushed = redis.Redis.from_url(opts.redis_url)
    flushed.flushdb()
    with tempfile.TemporaryDirectory(prefix="pb-bench-web-") as tmp, own_database(opts.database_url) as (url, name):
        data_dir = Path(tmp)
        host = Host(data_dir, url, opts.redis_url)
        direct_port = free_port()
        direct = subprocess.Popen(
            [PYTHON, "-m", "servers.mailbox", "--transport", "http", "--port", str(direct_port)]
            + ["--data-dir", str(data_dir / "direct")],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            host.wait_ready()
            token = json.loads(host.manage("token", "create", "bench", "--json"))["token"]
            direct_url = f"http://127.0.0.1:{direct_port}/mcp"
            wait_until(lambda: _listening(direct_port), 60, "the direct server")
            asyncio.run(measure(opts, host, token, direct_url, name, psutil.Process(direct.pid)))
        finally:
            direct.terminate()
            host.stop()
            flushed.flushdb()
    return 0


def _listening(port: int) -> bool:
    return not port_free(port)


if __name__ == "__main__":
    sys.exit(main())
