"""An MCP server over stdio that writes down every tool call it receives, for the outbox tests.

Hand-written JSON-RPC (2025-11-25 era, like tests/fixtures/hostile_server.py), so a test can
see exactly what reached the server: the arguments and the `_meta` of each `tools/call`,
appended to ``--log FILE`` (one JSON object a line) *before* the tool does anything.

Usage: ``python recorder_server.py --log FILE [--idempotent-hints] [--keys]``

  --idempotent-hints  every tool claims ``idempotentHint: true`` (a trusted host believes it)
  --keys              advertise ``dev.patchbay/idempotency`` under ``capabilities.experimental``

Tools (all annotated as non-destructive writes):

  note        declares an ``idempotency_key`` argument; answers "noted"
  note_camel  declares an ``idempotencyKey`` argument; answers "noted"
  plain       no key argument; answers "noted"
  fail        an ``isError`` result
  rpcerror    a JSON-RPC error -32602 (invalid params)
  crash       exits in the middle of the call (status 3)
  slow        sleeps ``seconds`` before answering
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--idempotent-hints", action="store_true")
parser.add_argument("--keys", action="store_true")
OPTIONS = parser.parse_args()
OUT_LOCK = threading.Lock()
LOG_LOCK = threading.Lock()


def send(obj: dict) -> None:
    with OUT_LOCK:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def record(entry: dict) -> None:
    with LOG_LOCK, open(OPTIONS.log, "a") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def tool(name: str, properties: dict | None = None) -> dict:
    return {
        "name": name,
        "description": f"The {name} tool of the recorder",
        "inputSchema": {"type": "object", "properties": properties or {}},
        "annotations": {
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": OPTIONS.idempotent_hints,
            "openWorldHint": False,
        },
    }


TEXT = {"text": {"type": "string"}}
TOOLS = [
    tool("note", {**TEXT, "idempotency_key": {"type": "string"}}),
    tool("note_camel", {**TEXT, "idempotencyKey": {"type": "string"}}),
    tool("plain", TEXT),
    tool("fail"),
    tool("rpcerror"),
    tool("crash"),
    tool("slow", {"seconds": {"type": "number"}}),
]


def text_result(text: str, is_error: bool = False) -> dict:
    out: dict = {"content": [{"type": "text", "text": text}]}
    if is_error:
        out["isError"] = True
    return out


def handle_call(msg_id: object, params: dict) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    record({"tool": name, "arguments": args, "meta": params.get("_meta") or {}, "pid": os.getpid()})
    if name in ("note", "note_camel", "plain"):
        send({"jsonrpc": "2.0", "id": msg_id, "result": text_result("noted")})
    elif name == "fail":
        send({"jsonrpc": "2.0", "id": msg_id, "result": text_result("the disk is full", is_error=True)})
    elif name == "rpcerror":
        send(
            {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32602, "message": "Invalid params: 'path' is required"}}
        )
    elif name == "crash":
        sys.stderr.write("fatal: the crash tool was called, exiting\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "slow":
        time.sleep(float(args.get("seconds", 5)))
        send({"jsonrpc": "2.0", "id": msg_id, "result": text_result("slept")})
    else:
        send({"jsonrpc": "2.0", "id": msg_id, "result": text_result(f"Unknown tool: {name}", is_error=True)})


def handle(msg: dict) -> None:
    method = msg.get("method")
    msg_id = msg.get("id")
    if msg_id is None:
        return
    if method == "initialize":
        capabilities: dict = {"tools": {"listChanged": False}}
        if OPTIONS.keys:
            capabilities["experimental"] = {"dev.patchbay/idempotency": {"metaKey": "dev.patchbay/idempotencyKey"}}
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "serverInfo": {"name": "recorder", "version": "0.0.1"},
        }
        send({"jsonrpc": "2.0", "id": msg_id, "result": result})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": msg_id, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        threading.Thread(target=handle_call, args=(msg_id, msg.get("params") or {}), daemon=True).start()
    else:
        send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        handle(msg)


if __name__ == "__main__":
    main()
