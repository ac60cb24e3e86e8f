"""The connection layer over HTTP: bundled servers in both eras, and failures by status."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hostapp.mcp import McpFailure, Pool, ServerConfig
from tests.fixtures.http_faults import FaultyServer
from tests.helpers import REPO, free_port, stop_process, wait_until


@contextlib.contextmanager
def serving(args: list[str], port: int, what: str) -> Iterator[str]:
    """Run a server over HTTP on `port` (`python ARGS...` in the repository) until the block
    ends; its MCP endpoint's URL."""
    proc = subprocess.Popen([sys.executable, *args], cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"

    def up() -> bool:
        assert proc.poll() is None
        httpx.get(url, timeout=1)
        return True

    try:
        wait_until(up, timeout=30, what=what)
        yield url
    finally:
        stop_process(proc, timeout=5)  # uvicorn waits for open keep-alive connections


@pytest.fixture
def mailbox_http(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    args = ["-m", "servers.mailbox", "--transport", "http", "--port", str(port), "--data-dir", str(tmp_path)]
    with serving(args, port, "the mailbox over HTTP") as url:
        yield url


def test_a_modern_http_server_is_reached_statelessly(pool: Pool, mailbox_http: str) -> None:
    pool.configure([ServerConfig("mailbox", "http", url=mailbox_http)])
    status = pool.connect("mailbox")
    assert status.state == "ready", status
    assert status.protocol_version == "2026-07-28"
    assert status.era == "modern"
    assert status.server_info["name"] == "mailbox"
    assert "dev.patchbay/idempotency" in (status.capabilities.get("experimental") or {})
    names = [t["name"] for t in pool.list_tools("mailbox")]
    assert names == ["search", "read", "archive", "send", "delete"]
    result = pool.call_tool("mailbox", "read", {"message_id": "msg-0001"})
    assert not result.get("isError")
    assert result["structuredContent"]["id"] == "msg-0001"


@pytest.mark.parametrize(
    ("code", "kind", "transient"),
    [
        (429, "transport", True),
        (503, "transport", True),
        (500, "ambiguous", True),
        (401, "transport", False),
        (403, "transport", False),
    ],
)
def test_http_statuses_are_classified(pool: Pool, code: int, kind: str, transient: bool) -> None:
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url)])
        assert pool.call_tool("faulty", "echo", {"text": "ok"})["content"][0]["text"] == "ok"
        with pytest.raises(McpFailure) as caught:
            pool.call_tool("faulty", "status", {"code": code})
        assert (caught.value.kind, caught.value.transient, caught.value.http_status) == (kind, transient, code)
        # The connection survives a failed request.
        assert pool.call_tool("faulty", "echo", {"text": "still"})["content"][0]["text"] == "still"


def test_an_oversized_json_body_is_refused(pool: Pool) -> None:
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url, max_message_bytes=64 * 1024)])
        assert pool.call_tool("faulty", "huge", {"size": 1000})["content"][0]["text"] == "z" * 1000
        with pytest.raises(McpFailure) as caught:
            pool.call_tool("faulty", "huge", {"size": 200_000})
        assert caught.value.reason == "message_too_large"


def test_a_timed_out_http_call_closes_its_stream(pool: Pool) -> None:
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url)])
        with pytest.raises(McpFailure) as caught:
            pool.call_tool("faulty", "slow", {"seconds": 5}, timeout=0.5)
        assert caught.value.reason == "timeout"
        wait_until(lambda: server.disconnected == ["slow"], timeout=5, what="the server to see the stream close")
        assert pool.call_tool("faulty", "echo", {"text": "after"})["content"][0]["text"] == "after"


def test_an_unreachable_server_is_a_transient_transport_error(pool: Pool) -> None:
    pool.configure([ServerConfig("gone", "http", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=5)])
    with pytest.raises(McpFailure) as caught:
        pool.call_tool("gone", "echo")
    assert caught.value.kind == "transport"
    assert caught.value.transient
    assert pool.status("gone").state in ("failing", "crash-looping", "connecting")


def test_a_server_that_refuses_authorization_is_permanent(pool: Pool) -> None:
    with FaultyServer(always_status=401) as server:
        pool.configure([ServerConfig("locked", "http", url=server.url, connect_timeout=5)])
        with pytest.raises(McpFailure) as caught:
            pool.call_tool("locked", "echo")
        assert caught.value.kind == "transport"
        assert not caught.value.transient, caught.value
        assert caught.value.http_status == 401


def test_headers_are_sent_with_every_request(pool: Pool) -> None:
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url, headers={"Authorization": "Bearer s3cret"})])
        pool.call_tool("faulty", "echo", {"text": "x"})
        assert len(server.headers) >= 2  # discover, call
        assert all(h.get("authorization") == "Bearer s3cret" for h in server.headers)
        call = next(h for h in server.headers if h.get("mcp-method") == "tools/call")
        assert call["mcp-method"] == "tools/call"
        assert call["mcp-name"] == "echo"
        assert call["mcp-protocol-version"] == "2026-07-28"


def test_a_listing_cut_off_by_the_server_is_asked_again_once(pool: Pool) -> None:
    """A listing changes nothing upstream: when the connection is lost under it (a server
    closing a kept-alive connection), the layer reconnects and asks again, once."""
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url, connect_timeout=5)])
        assert pool.call_tool("faulty", "echo", {"text": "up"})["content"][0]["text"] == "up"
        lists_before = sum(1 for r in server.requests if r.get("method") == "tools/list")
        server.drop_lists = 1
        tools = pool.list_tools("faulty")
        assert [t["name"] for t in tools] == ["echo", "status", "huge", "slow"]
        assert sum(1 for r in server.requests if r.get("method") == "tools/list") == lists_before + 2

        # Lost twice in a row: the failure is reported, not hidden.
        server.drop_lists = 2
        with pytest.raises(McpFailure) as caught:
            pool.list_tools("faulty")
        assert caught.value.ambiguous and caught.value.reason == "lost", caught.value


def test_a_tool_call_cut_off_is_not_repeated(pool: Pool) -> None:
    """A call may have acted: it is never sent twice by the layer."""
    with FaultyServer() as server:
        pool.configure([ServerConfig("faulty", "http", url=server.url, connect_timeout=5)])
        with pytest.raises(McpFailure) as caught:
            pool.call_tool("faulty", "cut")
        assert caught.value.ambiguous, caught.value
        assert sum(1 for r in server.requests if (r.get("params") or {}).get("name") == "cut") == 1


@pytest.fixture
def header_server() -> Iterator[str]:
    port = free_port()
    with serving(["tests/fixtures/header_server.py", str(port)], port, "the header server") as url:
        yield url


def test_an_argument_annotated_for_a_header_is_sent_in_it(pool: Pool, header_server: str) -> None:
    """The 2026 revision's `x-mcp-header`: the server refuses a call whose annotated argument
    is not mirrored into its `Mcp-Param-*` header; the listing told the client to mirror it."""
    pool.configure([ServerConfig("headers", "http", url=header_server)])
    assert pool.connect("headers").protocol_version == "2026-07-28"
    listed = {t["name"]: t for t in pool.list_tools("headers")}
    assert listed["where"]["inputSchema"]["properties"]["region"]["x-mcp-header"] == "Region"
    result = pool.call_tool("headers", "where", {"region": "eu-west", "note": "ok"}, timeout=20)
    assert result["isError"] is False
    assert result["content"][0]["text"] == "region eu-west ok"
