"""The connection layer against real third-party MCP servers, run the way users run them.

Peers:

* ``mcp-server-time`` (PyPI, in the venv; built on ``mcp`` 2.x): modern era, stdio.
* ``@modelcontextprotocol/server-everything`` (npm 2026.8.31, TypeScript SDK 1.32.2, run with the
  Node 22 binary from ``node_modules``): legacy era only, over stdio, Streamable HTTP and HTTP+SSE.
  Its HTTP modes bind every interface and read only ``PORT``; a ``--import`` preload makes its
  numeric ``listen()`` calls bind 127.0.0.1 (tests/conformance/notes.md, section 3), and the
  tests check that nothing else listens. Its ``get-env`` tool returns the whole environment, so
  the HTTP instances start from a scrubbed one.
* the bundled servers (``python -m servers.<name>``), modern era, over stdio and Streamable HTTP.

The Node-based tests skip when ``npm ci`` has not been run, and fail instead when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from hostapp.mcp import McpFailure, Pool, PoolEvent, ServerConfig, result_failure
from hostapp.mcp.pool import READY
from tests.helpers import EVERYTHING, NODE, REPO, free_port, need_installed, process_gone, wait_until

from .conftest import TEST_POLICY, bundled

TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"

MODERN = "2026-07-28"
LEGACY = "2025-11-25"

# Makes a numeric `server.listen(port)` bind 127.0.0.1 instead of every interface.
LOOPBACK_PRELOAD = (
    'data:text/javascript,import net from "node:net";const o=net.Server.prototype.listen;'
    'net.Server.prototype.listen=function(...a){if((typeof a[0]==="number"||/^[0-9]+$/.test(String(a[0])))'
    '&&typeof a[1]!=="string")a.splice(1,0,"127.0.0.1");return o.apply(this,a)};'
)

# What server-everything lists to a client that declares sampling and elicitation in both
# modes (as the host does: it passes a server's sampling request to the agent whose call it
# is, and its requests for input to a person or that agent) but no roots.
EVERYTHING_TOOLS = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
    "simulate-research-query",
]

BUNDLED_TOOLS = {
    "mailbox": ["search", "read", "archive", "send", "delete"],
    "tasks": ["list", "add", "complete", "delete"],
    "calendar": ["list", "create", "cancel"],
}


# -- helpers ------------------------------------------------------------------------------


def _need_node() -> None:
    need_installed("server-everything (with Node 22)", NODE, EVERYTHING)


@pytest.fixture
def node_peers() -> None:
    _need_node()


def _listening(pid: int) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet") if c.status == "LISTEN"
    ]


@dataclass
class Served:
    url: str
    pid: int


@contextmanager
def _serve(
    argv: list[str], *, env: dict[str, str], port: int, path: str, log: Path, cwd: Path | None = None
) -> Iterator[Served]:
    """Run an HTTP server in its own process group until the block ends; yield its URL once it accepts."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def accepting() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"{argv[-1]} exited with status {proc.returncode}:\n{log.read_text(errors='replace')}")
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_until(accepting, timeout=30, what=f"{' '.join(argv[-2:])} to accept connections on port {port}")
        yield Served(f"http://127.0.0.1:{port}{path}", proc.pid)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:  # uvicorn waits for open keep-alive connections
                continue
        proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers left in the group
        except ProcessLookupError:
            pass


@pytest.fixture
def everything_http(node_peers: None, tmp_path: Path) -> Iterator[Callable[[str], Served]]:
    """Start server-everything in an HTTP mode ("streamableHttp" or "sse"), loopback only."""
    with ExitStack() as stack:

        def start(mode: str) -> Served:
            port = free_port()
            return stack.enter_context(
                _serve(
                    [str(NODE), "--import", LOOPBACK_PRELOAD, str(EVERYTHING), mode],
                    env={"PATH": "/usr/bin:/bin", "PORT": str(port)},  # scrubbed: get-env returns all of it
                    port=port,
                    path="/mcp" if mode == "streamableHttp" else "/sse",
                    log=tmp_path / f"everything-{mode}.log",
                )
            )

        yield start


def _everything_stdio(**kw: object) -> ServerConfig:
    return ServerConfig("everything", "stdio", command=str(NODE), args=(str(EVERYTHING),), **kw)  # type: ignore[arg-type]


def _text(result: dict) -> str:
    assert not result.get("isError"), result
    return "".join(c["text"] for c in result["content"] if c["type"] == "text")


def _check_everything(pool: Pool, name: str) -> None:
    """Revision, exact tool list and read-only calls: the same whatever the transport."""
    status = pool.connect(name)
    assert status.state == READY, status.last_error
    assert status.protocol_version == LEGACY
    assert status.era == "legacy"
    assert status.server_info["name"] == "mcp-servers/everything"
    assert status.capabilities["tools"] == {"listChanged": True}
    tools = pool.list_tools(name)
    assert [t["name"] for t in tools] == EVERYTHING_TOOLS
    assert not any(t.get("annotations", {}).get("destructiveHint") for t in tools)
    assert _text(pool.call_tool(name, "echo", {"message": "hi"})) == "Echo: hi"
    assert _text(pool.call_tool(name, "get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
    structured = pool.call_tool(name, "get-structured-content", {"location": "New York"})
    assert structured["structuredContent"]["temperature"] == 33
    # A real server's unknown tool is an isError result carrying -32602; the layer tells it apart.
    unknown = result_failure(pool.call_tool(name, "no-such-tool", {}), "no-such-tool")
    assert unknown is not None and (unknown.kind, unknown.reason) == ("protocol", "unknown_tool")


EVERYTHING_DOCUMENTS = [
    "architecture.md",
    "extension.md",
    "features.md",
    "how-it-works.md",
    "instructions.md",
    "startup.md",
    "structure.md",
]


def _check_offered(pool: Pool, name: str) -> None:
    """Resources, their templates and prompts: listed, read and filled in, on any transport."""
    offered = pool.list_offered(name)
    assert [r["name"] for r in offered["resources"]] == EVERYTHING_DOCUMENTS
    assert [t["uriTemplate"] for t in offered["resource_templates"]] == [
        "demo://resource/dynamic/text/{resourceId}",
        "demo://resource/dynamic/blob/{resourceId}",
    ]
    assert [p["name"] for p in offered["prompts"]] == [
        "simple-prompt",
        "args-prompt",
        "completable-prompt",
        "resource-prompt",
    ]
    document = pool.read_resource(name, offered["resources"][0]["uri"])
    assert document["contents"][0]["mimeType"] == "text/markdown"
    assert document["contents"][0]["text"].startswith("# Everything Server")
    made = pool.read_resource(name, "demo://resource/dynamic/text/3")
    assert made["contents"][0]["text"].startswith("Resource 3: This is a plaintext resource")
    prompt = pool.get_prompt(name, "args-prompt", {"city": "Lyon", "state": "Rhône"})
    assert prompt["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "What's weather in Lyon, Rhône?"}}
    ]
    with pytest.raises(McpFailure) as missing:
        pool.read_resource(name, "demo://nope")
    assert (missing.value.kind, missing.value.reason) == ("protocol", "invalid_params")
    assert "Resource demo://nope not found" in missing.value.message


def _tools_changed(events: list[PoolEvent], name: str) -> list[PoolEvent]:
    return [e for e in events if e.kind == "tools_changed" and e.server == name]


# -- mcp-server-time (PyPI, modern) ---------------------------------------------------------------


def test_mcp_server_time_over_stdio(pool: Pool) -> None:
    assert TIME_SERVER.exists(), "mcp-server-time is pinned in requirements-dev.txt"
    pool.configure([ServerConfig("time", "stdio", command=str(TIME_SERVER))])
    status = pool.connect("time")
    assert status.state == READY, status.last_error
    assert status.protocol_version == MODERN
    assert status.era == "modern"
    assert status.server_info["name"] == "mcp-time"
    tools = pool.list_tools("time")
    assert [t["name"] for t in tools] == ["get_current_time", "convert_time"]
    assert all(t["annotations"]["readOnlyHint"] is True for t in tools)

    before = datetime.now(UTC)
    result = pool.call_tool("time", "get_current_time", {"timezone": "UTC"})
    after = datetime.now(UTC)
    answer = json.loads(_text(result))
    assert answer == result["structuredContent"]
    assert answer["timezone"] == "UTC"
    moment = datetime.fromisoformat(answer["datetime"])
    assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0
    # The server reports whole seconds.
    assert before.replace(microsecond=0) - (after - before) <= moment <= after, (before, moment, after)

    converted = pool.call_tool(
        "time", "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    )
    assert converted["structuredContent"]["target"]["datetime"].endswith("T21:00:00+09:00")


# -- server-everything (npm, legacy) ---------------------------------------------------------------


def test_server_everything_over_stdio(node_peers: None, pool: Pool) -> None:
    pool.configure([_everything_stdio()])
    _check_everything(pool, "everything")
    _check_offered(pool, "everything")
    pid = pool.status("everything").pid
    assert pid is not None
    pool.close()
    wait_until(lambda: process_gone(pid), timeout=10, what="server-everything to exit")


def test_server_everything_task_only_tool_is_listed_but_fails_a_plain_call(node_peers: None, pool: Pool) -> None:
    """`simulate-research-query` needs task augmentation, which the host does not use: the
    listing says so (`execution.taskSupport`), and a plain call is a permanent failure."""
    pool.configure([_everything_stdio()])
    tool = next(t for t in pool.list_tools("everything") if t["name"] == "simulate-research-query")
    assert tool["execution"] == {"taskSupport": "required"}
    result = pool.call_tool("everything", "simulate-research-query", {"topic": "tides"})
    failure = result_failure(result, "simulate-research-query")
    assert failure is not None and not failure.transient
    assert "task augmentation" in failure.message


def test_server_everything_sees_no_host_secret(node_peers: None, pool: Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its get-env tool returns its whole environment: the host's secrets must not be in it."""
    monkeypatch.setenv("SECRET_KEY", "host-secret-key-value")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/prod")
    pool.configure([_everything_stdio(env={"GIVEN": "configured"})])
    child_env = json.loads(_text(pool.call_tool("everything", "get-env")))
    assert "SECRET_KEY" not in child_env
    assert "DATABASE_URL" not in child_env
    assert child_env["GIVEN"] == "configured"


def test_server_everything_announces_a_tools_change_over_stdio(node_peers: None) -> None:
    """After `notifications/initialized` it registers the tools that depend on the client's
    capabilities (here `simulate-research-query`), and the TypeScript SDK then sends an
    unsolicited `notifications/tools/list_changed`: the pool turns it into an event."""
    events: list[PoolEvent] = []
    pool = Pool(TEST_POLICY, listener=events.append)
    try:
        pool.configure([_everything_stdio()])
        assert pool.connect("everything").state == READY
        wait_until(lambda: _tools_changed(events, "everything"), timeout=10, what="a tools_changed event")
        assert _tools_changed(events, "everything")[0].status.protocol_version == LEGACY
    finally:
        pool.close()


def test_server_everything_over_streamable_http(everything_http: Callable[[str], Served], pool: Pool) -> None:
    served = everything_http("streamableHttp")
    assert {ip for ip, _ in _listening(served.pid)} == {"127.0.0.1"}
    pool.configure([ServerConfig("everything", "http", url=served.url)])
    _check_everything(pool, "everything")
    _check_offered(pool, "everything")
    # Over legacy Streamable HTTP its one list_changed goes out while the server handles the
    # `notifications/initialized` POST, before the client has opened its GET stream, so it is
    # stored for a replay no one asks for: no tools_changed event is expected here.


def test_server_everything_over_http_sse(everything_http: Callable[[str], Served]) -> None:
    served = everything_http("sse")
    assert {ip for ip, _ in _listening(served.pid)} == {"127.0.0.1"}
    events: list[PoolEvent] = []
    pool = Pool(TEST_POLICY, listener=events.append)
    try:
        pool.configure([ServerConfig("everything", "sse", url=served.url)])
        _check_everything(pool, "everything")
        # One SSE stream carries everything, so the post-initialize list_changed arrives.
        wait_until(lambda: _tools_changed(events, "everything"), timeout=10, what="a tools_changed event")
    finally:
        pool.close()


# -- the bundled servers (modern) ----------------------------------------------------------------


def _check_bundled(pool: Pool, name: str) -> None:
    status = pool.connect(name)
    assert status.state == READY, status.last_error
    assert status.protocol_version == MODERN
    assert status.era == "modern"
    assert status.server_info["name"] == name
    tools = pool.list_tools(name)
    assert [t["name"] for t in tools] == BUNDLED_TOOLS[name]
    # Tools only (a 2026-07-28 listing of each kind it declares comes back empty).
    assert pool.list_offered(name) == {"resources": [], "resource_templates": [], "prompts": []}
    if name == "mailbox":
        found = pool.call_tool("mailbox", "search", {"query": "88213"})["structuredContent"]
        assert found["total"] == 2
        assert [m["id"] for m in found["messages"]] == ["msg-0003", "msg-0007"]
        assert all("88213" in m["subject"] for m in found["messages"])
    elif name == "tasks":
        listed = pool.call_tool("tasks", "list", {"status": "open"})["structuredContent"]
        assert listed["total"] == 4
        assert [t["id"] for t in listed["tasks"]] == ["task-0001", "task-0002", "task-0003", "task-0004"]
    else:
        listed = pool.call_tool("calendar", "list", {})["structuredContent"]
        assert [e["id"] for e in listed["events"]] == ["evt-0001", "evt-0002", "evt-0003", "evt-0004"]


@pytest.mark.parametrize("name", sorted(BUNDLED_TOOLS))
def test_bundled_server_over_stdio(pool: Pool, tmp_path: Path, name: str) -> None:
    pool.configure([bundled(name, tmp_path)])
    _check_bundled(pool, name)


@pytest.mark.parametrize("name", sorted(BUNDLED_TOOLS))
def test_bundled_server_over_http(tmp_path: Path, name: str) -> None:
    port = free_port()
    argv = [sys.executable, "-m", f"servers.{name}", "--transport", "http", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TZ")}
    with _serve(argv, env=env, port=port, path="/mcp", log=tmp_path / "server.log", cwd=REPO) as served:
        assert {ip for ip, _ in _listening(served.pid)} == {"127.0.0.1"}
        pool = Pool(TEST_POLICY)
        try:
            pool.configure([ServerConfig(name, "http", url=served.url)])
            _check_bundled(pool, name)
        finally:
            pool.close()  # before the server, so uvicorn has no keep-alive connection to wait for
