"""How the bundled servers are launched and reached: stdio and Streamable HTTP, both protocol eras,
the capability ad, the data directory, and several processes sharing one SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters

from .conftest import (
    EXTENSION_ID,
    EXTENSION_SETTINGS,
    LEGACY_VERSION,
    META_KEY,
    MODERN_VERSION,
    MODES,
    REPO_ROOT,
    HttpServer,
    advertised,
    http_server,
    key_meta,
    new_key,
    ok,
    stdio_client,
    stdio_params,
    unique,
)

pytestmark = pytest.mark.anyio

SERVERS = ("mailbox", "tasks", "calendar")
MCP_JSON = REPO_ROOT / "servers" / "mcp.json"


def configured(name: str, data_dir: Path) -> StdioServerParameters:
    """The launch command from servers/mcp.json; `python` is the venv's (first on the host's PATH)."""
    entry = json.loads(MCP_JSON.read_text())["mcpServers"][name]
    command = sys.executable if entry["command"] == "python" else entry["command"]
    return StdioServerParameters(
        command=command, args=[*entry["args"], "--data-dir", str(data_dir)], cwd=str(REPO_ROOT)
    )


def assert_advertised(client: Client, mode: str) -> None:
    ad = advertised(client)
    # `experimental` exists in both eras' schemas, so the ad is always there.
    assert ad["experimental"] == EXTENSION_SETTINGS
    if mode == "auto":
        assert client.protocol_version == MODERN_VERSION
        assert ad["extensions"] == EXTENSION_SETTINGS
    else:
        assert client.protocol_version == LEGACY_VERSION
        # The handshake-era ServerCapabilities has no `extensions`; the SDK sieves it out.
        assert ad["extensions"] in (None, EXTENSION_SETTINGS)


# --- Configuration and stdio ---


def test_mcp_json_configures_the_three_servers_over_stdio_as_trusted() -> None:
    config = json.loads(MCP_JSON.read_text())
    assert config == {
        "mcpServers": {
            name: {"command": "python", "args": ["-m", f"servers.{name}"], "trusted": True} for name in SERVERS
        }
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SERVERS)
async def test_each_configured_server_starts_over_stdio_and_advertises_idempotency(
    name: str, mode: str, tmp_path: Path
) -> None:
    async with Client(configured(name, tmp_path), mode=mode, read_timeout_seconds=30) as client:  # type: ignore[arg-type]
        assert_advertised(client, mode)
        assert client.server_info is not None and client.server_info.name == name
        assert (await client.list_tools()).tools
    assert (tmp_path / f"{name}.sqlite3").exists()


async def test_stdout_carries_only_json_rpc_messages_and_logs_go_to_stderr(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.log"
    requests: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"title": "Raw"}, "_meta": {META_KEY: "raw-1"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "complete", "arguments": {"task_id": "x"}},
        },
    ]
    command = [sys.executable, "-m", "servers.tasks", "--data-dir", str(tmp_path), "--log-level", "DEBUG"]
    with stderr_path.open("wb") as stderr:
        async with await anyio.open_process(command, cwd=REPO_ROOT, stderr=stderr) as process:
            assert process.stdin is not None and process.stdout is not None
            stdout = BufferedByteReceiveStream(process.stdout)
            responses: dict[int, dict[str, Any]] = {}
            with anyio.fail_after(20):
                for request in requests:
                    await process.stdin.send(json.dumps(request).encode() + b"\n")
                while len(responses) < 4:
                    message = json.loads(await stdout.receive_until(b"\n", 1 << 20))
                    assert message["jsonrpc"] == "2.0"
                    if "id" in message:
                        responses[message["id"]] = message
                await process.stdin.aclose()  # closing stdin shuts the server down
                rest = b""
                try:
                    while True:
                        rest += await stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    pass
                assert await process.wait() == 0
    for line in rest.splitlines():
        if line.strip():
            assert json.loads(line)["jsonrpc"] == "2.0"
    capabilities = responses[1]["result"]["capabilities"]
    assert capabilities["experimental"][EXTENSION_ID] == EXTENSION_SETTINGS
    assert {tool["name"] for tool in responses[2]["result"]["tools"]} == {"list", "add", "complete", "delete"}
    assert responses[3]["result"]["structuredContent"]["title"] == "Raw"
    assert responses[4]["result"]["isError"] is True
    assert stderr_path.read_bytes(), "DEBUG logging should have written to stderr"


async def test_the_data_dir_defaults_to_patchbay_data_dir_servers(tmp_path: Path) -> None:
    params = stdio_params("tasks", None, env={"PATCHBAY_DATA_DIR": str(tmp_path)})
    async with Client(params, read_timeout_seconds=30) as client:
        ok(await client.call_tool("list", {}))
    database = tmp_path / "servers" / "tasks.sqlite3"
    assert database.exists()
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_the_data_dir_defaults_to_var_servers_without_patchbay_data_dir(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "servers.calendar"], cwd=str(tmp_path), env={"PYTHONPATH": str(REPO_ROOT)}
    )
    async with Client(params, read_timeout_seconds=30) as client:
        ok(await client.call_tool("list", {}))
    assert (tmp_path / "var" / "servers" / "calendar.sqlite3").exists()


def test_http_refuses_to_bind_anything_but_loopback(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "servers.mailbox",
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert b"loopback" in result.stderr
    assert result.stdout == b""


# --- Streamable HTTP ---


@pytest.mark.parametrize("mode", MODES)
async def test_http_serves_both_eras_and_advertises_idempotency(http_mailbox: HttpServer, mode: str) -> None:
    async with Client(http_mailbox.url, mode=mode, read_timeout_seconds=30) as client:  # type: ignore[arg-type]
        assert_advertised(client, mode)
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"search", "read", "archive", "send", "delete"}
        assert tools["send"].annotations is not None and tools["send"].annotations.destructive_hint is True


@pytest.mark.parametrize("mode", MODES)
async def test_http_honours_an_idempotency_key_in_both_eras(http_mailbox: HttpServer, mode: str) -> None:
    subject, key = unique(f"Over HTTP ({mode})"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Once."}
    async with Client(http_mailbox.url, mode=mode, read_timeout_seconds=30) as client:  # type: ignore[arg-type]
        first = ok(await client.call_tool("send", arguments, meta=key_meta(key)))
        second = ok(await client.call_tool("send", arguments, meta=key_meta(key)))
        found = ok(await client.call_tool("search", {"query": subject}))
    assert second == first
    assert found["total"] == 1


def _post(url: str, headers: dict[str, str]) -> int:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
    ).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


async def test_http_rejects_a_foreign_origin_and_host(http_mailbox: HttpServer) -> None:
    url = http_mailbox.url
    assert await anyio.to_thread.run_sync(_post, url, {"Origin": f"http://127.0.0.1:{http_mailbox.port}"}) == 200
    assert await anyio.to_thread.run_sync(_post, url, {"Origin": "http://evil.example"}) == 403
    assert await anyio.to_thread.run_sync(_post, url, {"Host": "evil.example"}) == 421


# --- Several processes, one file ---


async def test_a_stdio_and_an_http_instance_share_the_data_file_and_its_keys(tmp_path: Path) -> None:
    subject, key = unique("Shared"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Sent via stdio, replayed via HTTP."}
    with http_server("mailbox", tmp_path) as running:
        async with (
            stdio_client("mailbox", tmp_path) as over_stdio,
            Client(running.url, read_timeout_seconds=30) as over_http,
        ):
            first = ok(await over_stdio.call_tool("send", arguments, meta=key_meta(key)))
            replay = ok(await over_http.call_tool("send", arguments, meta=key_meta(key)))
            assert replay == first
            assert ok(await over_http.call_tool("read", {"message_id": first["id"]})) == first
            assert ok(await over_http.call_tool("search", {"query": subject}))["total"] == 1


async def race(clients: list[Client], title: str, key: str) -> list[dict[str, Any]]:
    """Fire the same keyed `add` from every client at once; return every result."""
    results: list[dict[str, Any]] = []

    async def call(client: Client) -> None:
        results.append(ok(await client.call_tool("add", {"title": title}, meta=key_meta(key))))

    async with anyio.create_task_group() as group:
        for client in clients:
            group.start_soon(call, client)
    return results


async def test_two_processes_racing_with_one_key_produce_one_effect(tmp_path: Path) -> None:
    async with stdio_client("tasks", tmp_path) as one, stdio_client("tasks", tmp_path, "legacy") as two:
        for _ in range(3):
            title, key = unique("Raced"), new_key()
            results = await race([one, two] * 3, title, key)
            assert len(results) == 6 and all(result == results[0] for result in results)
            listing = ok(await one.call_tool("list", {"status": "open"}))
            assert [task["id"] for task in listing["tasks"] if task["title"] == title] == [results[0]["id"]]


CRASH_MID_TRANSACTION = """
import os, sys
from pathlib import Path
from servers import mailbox

store = mailbox.open_store(Path(sys.argv[1]))


def effect(conn):
    conn.execute(
        "INSERT INTO messages (id, folder, sender, recipients, subject, body, date) "
        "VALUES ('msg-crash', 'sent', 'you@patchbay.example', '[]', ?, 'x', '2026-05-01T00:00:00+00:00')",
        (sys.argv[2],),
    )
    os._exit(17)  # the process dies after the effect, before the key is recorded and committed


store.write(tool="send", arguments={}, key=sys.argv[3], result_type=mailbox.Message, effect=effect)
"""


async def test_a_crash_mid_call_leaves_neither_the_effect_nor_the_key(tmp_path: Path) -> None:
    subject, key = unique("Crashed"), new_key()
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_MID_TRANSACTION, str(tmp_path), subject, key],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
    )
    assert crashed.returncode == 17, crashed.stderr
    async with stdio_client("mailbox", tmp_path) as client:
        assert ok(await client.call_tool("search", {"query": subject}))["total"] == 0
        arguments = {"to": "lee@example.com", "subject": subject, "body": "Second attempt."}
        retried = ok(await client.call_tool("send", arguments, meta=key_meta(key)))  # the key is still free
        assert retried["subject"] == subject
        assert ok(await client.call_tool("search", {"query": subject}))["total"] == 1
