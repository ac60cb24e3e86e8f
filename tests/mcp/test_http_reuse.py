"""A kept-alive connection the server closes as a request goes out on it.

HTTP servers close idle connections after a few seconds (uvicorn and Node after 5). A
request sent on one at that moment gets no answer: the connection ends before the status
line. The host sends such a request again, once, on a new connection, when repeating it
changes nothing on the server (a listing, a discovery, a handshake); a tool call is never
sent twice.

The server here is a plain socket server that answers the first request on each connection
and closes the connection, unanswered, at the second: every reused connection is one the
server has just closed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from hostapp.mcp.http import CallTrace, current_trace, make_http_client


class ClosingServer:
    """Answers the first request of each connection with a JSON-RPC result (keeping the
    connection open) and closes the connection at the second without answering."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.answered: list[dict[str, Any]] = []  # requests answered, in order
        self.dropped: list[dict[str, Any]] = []  # requests whose connection was closed on them
        self.connections = 0
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for number in (1, 2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode().split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if number == 2:
                    self.dropped.append(body)
                    return  # closed, unanswered
                self.answered.append(body)
                payload = json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": {"tools": []}}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def __enter__(self) -> ClosingServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture
def server() -> Iterator[ClosingServer]:
    with ClosingServer() as s:
        yield s


def request(method: str, msg_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {}}


async def post_twice(url: str, first: dict[str, Any], second: dict[str, Any]) -> tuple[Any, Any]:
    """Two POSTs on one client: the second goes out on the first's kept-alive connection."""
    async with make_http_client(max_body_bytes=1 << 20) as client:
        one = await client.post(url, json=first)
        try:
            two: Any = await client.post(url, json=second)
        except httpx2.TransportError as exc:
            two = exc
        return one, two


@pytest.mark.parametrize("method", ["tools/list", "server/discover", "initialize", "ping", "subscriptions/listen"])
def test_a_request_that_changes_nothing_is_sent_again_on_a_new_connection(server: ClosingServer, method: str) -> None:
    one, two = asyncio.run(post_twice(server.url, request("tools/list", 1), request(method, 2)))

    assert one.status_code == 200
    assert isinstance(two, httpx2.Response) and two.status_code == 200, two
    assert two.json()["id"] == 2
    assert [r["id"] for r in server.dropped] == [2]  # the closed connection got it first
    assert [r["id"] for r in server.answered] == [1, 2]  # then a new one, once
    assert server.connections == 2


@pytest.mark.parametrize("method", ["tools/call", "resources/subscribe", "made/up"])
def test_a_tool_call_is_never_sent_twice(server: ClosingServer, method: str) -> None:
    """The server may have acted on it: a lost call is for the caller (and the outbox) to
    resolve, with its idempotency key, not for the transport to repeat."""
    one, two = asyncio.run(post_twice(server.url, request("tools/list", 1), request(method, 2)))

    assert one.status_code == 200
    assert isinstance(two, httpx2.RemoteProtocolError), two
    assert [r["id"] for r in server.dropped] == [2]
    assert [r["id"] for r in server.answered] == [1]
    assert server.connections == 1


def test_a_notification_is_not_sent_again(server: ClosingServer) -> None:
    """A notification has no answer to wait for, and a repeated one is not the same."""
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    one, two = asyncio.run(post_twice(server.url, request("tools/list", 1), note))

    assert isinstance(two, httpx2.RemoteProtocolError), two
    assert server.connections == 1


def test_the_trace_of_a_repeated_request_is_the_answered_one(server: ClosingServer) -> None:
    """The call's trace says what came back in the end (sent, 200), with no error."""

    async def go() -> CallTrace:
        trace = CallTrace()
        token = current_trace.set(trace)
        try:
            await post_twice(server.url, request("tools/list", 1), request("tools/list", 2))
        finally:
            current_trace.reset(token)
        return trace

    trace = asyncio.run(go())
    assert (trace.sent, trace.status, trace.error, trace.connect_failed) == (True, 200, "", False)


def test_the_client_keeps_httpxs_connection_limits_with_its_shorter_keepalive() -> None:
    client = make_http_client(max_body_bytes=1 << 20)
    pool = client._transport.inner._pool  # type: ignore[attr-defined]
    assert (pool._max_connections, pool._max_keepalive_connections, pool._keepalive_expiry) == (100, 20, 4.0)
