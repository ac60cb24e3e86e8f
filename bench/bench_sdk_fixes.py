"""What `hostapp/mcp/sdk_fixes.py` saves: the SDK's functions against the fixes, on listings.

Run from the repository root::

    .venv/bin/python bench/bench_sdk_fixes.py [--tools 100] [--listings 100] [--repeat 5]

One listing of ``--tools`` tools shaped as the catalog benchmark's servers list them
(``bench/catalog_servers.py``), as the JSON-RPC response a client receives. For each
function, the CPU time (``time.process_time``) to handle ``--listings`` such listings, the
SDK's own and the fix, alternating, ``--repeat`` times, each after a garbage collection; the table gives the median and the
range, and the ratio of the medians:

* reading the message (``jsonrpc_message_adapter.validate_json``), as every client
  transport does with each message it receives;
* checking the result against the negotiated revision's shape
  (``mcp_types.methods.validate_server_result``), for each revision the catalog servers
  can speak with a result of this kind.

Both are checked to end alike first (the same message, the same outcome of the check).
No network, no database: the functions alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def listing(n_tools: int) -> dict[str, Any]:
    """A `tools/list` result as a catalog benchmark server sends it (2026 fields included)."""
    from catalog_servers import _tools_for
    from mcp.server.mcpserver import MCPServer

    server: MCPServer[Any] = MCPServer("bench", tools=_tools_for(3, n_tools), log_level="WARNING")
    tools = asyncio.run(server.list_tools())
    return {
        "tools": [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools],
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    }


def cpu(fn: Callable[[], object], times: int) -> float:
    gc.collect()  # each run starts without the garbage of the one before
    started = time.process_time()
    for _ in range(times):
        fn()
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--listings", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from hostapp.mcp import sdk_fixes

    result = listing(args.tools)
    message = json.dumps({"jsonrpc": "2.0", "id": 7, "result": result}).encode()
    sdk_read = sdk_fixes._sdk_message_adapter.validate_json
    fix_read = sdk_fixes.message_adapter.validate_json
    assert sdk_read(message, by_name=False) == fix_read(message, by_name=False)

    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "read the message",
            lambda: sdk_read(message, by_name=False),
            lambda: fix_read(message, by_name=False),
        )
    ]
    for version in ("2025-11-25", "2026-07-28"):
        assert sdk_fixes._sdk_validate_server_result("tools/list", version, result) is None
        assert sdk_fixes.validate_server_result("tools/list", version, result) is None
        cases.append(
            (
                f"check the result's shape ({version})",
                lambda v=version: sdk_fixes._sdk_validate_server_result("tools/list", v, result),
                lambda v=version: sdk_fixes.validate_server_result("tools/list", v, result),
            )
        )

    print(f"# {args.listings} listings of {args.tools} tools ({len(message) / 1024:.0f} KiB each), CPU seconds")
    print(f"# median (min-max) of {args.repeat} alternating runs\n")
    print("| step | SDK | fix | fix / SDK |")
    print("|---|---:|---:|---:|")
    for label, sdk, fix in cases:
        sdk(), fix()  # warm
        sdk_times: list[float] = []
        fix_times: list[float] = []
        for _ in range(args.repeat):
            sdk_times.append(cpu(sdk, args.listings))
            fix_times.append(cpu(fix, args.listings))
        s, f = statistics.median(sdk_times), statistics.median(fix_times)
        print(
            f"| {label} | {s:.3f} ({min(sdk_times):.3f}-{max(sdk_times):.3f}) "
            f"| {f:.3f} ({min(fix_times):.3f}-{max(fix_times):.3f}) | {f / s:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
