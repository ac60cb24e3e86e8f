"""HTTP plumbing under the SDK's Streamable HTTP and HTTP+SSE clients.

One ``httpx2.AsyncClient`` per server connection, built once and reused for every
request of that connection (creating a TLS context costs tens of milliseconds). Its
transport is wrapped by :class:`GuardedTransport`, which

* caps what a server may send: a JSON body, or one SSE event, over ``max_body_bytes``
  is refused without being buffered (:class:`ResponseTooLarge`);
* records, for the call being made, whether the request left (the connection was
  established) and the HTTP status that came back. The SDK reports every non-2xx reply
  as the same JSON-RPC error; the trace is how the layer tells a 429 from a 401 from a
  500, and "never sent" from "sent, answer lost";
* sends a request again, once, when its connection ended before any answer and repeating
  it changes nothing on the server (`repeatable`). HTTP servers close idle kept-alive
  connections (uvicorn and Node after 5 seconds), and a request sent on one as it closes
  gets no answer. Without this, the SDK takes the error for the end of the whole
  connection, and every request in flight on it is lost with it. A tool call is never
  repeated: the server may have acted on it.

The trace travels in a context variable: the SDK sends each POST from a task started in
the caller's context, so the variable set around ``call_tool`` is the one the
transport sees.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2

logger = logging.getLogger(__name__)

# JSON-RPC requests that read and change nothing on the server: to send one again is safe.
# (`initialize` and `subscriptions/listen` start something, which the server drops with the
# connection that asked for it.)
REPEATABLE_METHODS = frozenset(
    {
        "initialize", "ping", "server/discover", "subscriptions/listen",
        "tools/list", "prompts/list", "prompts/get", "resources/list", "resources/templates/list",
        "resources/read", "completion/complete",
    }
)  # fmt: skip

# How long an idle connection is kept for the next request: less than the 5 seconds after
# which uvicorn and Node close theirs, so that the host is the one to close it. (The other
# limits are httpx's defaults, which a `Limits` given leaves unset.)
KEEPALIVE_EXPIRY = 4.0

# What a connection that ended before the answer's status line raises.
_ENDED_UNANSWERED = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)


def repeatable(request: httpx2.Request) -> bool:
    """Whether sending `request` again changes nothing on the server: a GET (a stream of
    server messages), a DELETE (the end of a session), or a POST of one JSON-RPC request
    whose method is in `REPEATABLE_METHODS` (a notification has no answer to wait for)."""
    if request.method in ("GET", "DELETE"):
        return True
    if request.method != "POST":
        return False
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return False
    return isinstance(message, dict) and "id" in message and message.get("method") in REPEATABLE_METHODS


class ResponseTooLarge(httpx2.StreamError):
    """The server sent a body or an event larger than the cap."""


@dataclass
class CallTrace:
    """What happened on the wire for one call."""

    connect_failed: bool = False
    sent: bool = False
    status: int | None = None
    # A 401/403 seen on any request of this trace: during a handshake the SDK may fall
    # back from discovery to initialize, and the last status is not the telling one.
    auth_status: int | None = None
    too_large: bool = False
    error: str = ""


current_trace: contextvars.ContextVar[CallTrace | None] = contextvars.ContextVar("patchbay_call_trace", default=None)


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, cap: int, sse: bool, trace: CallTrace | None) -> None:
        self.inner = inner
        self.cap = cap
        self.sse = sse
        self.trace = trace

    async def __aiter__(self) -> AsyncIterator[bytes]:
        run = 0  # bytes since the last event boundary (SSE) or since the start (JSON)
        tail = b""
        async for chunk in self.inner:
            if self.sse:
                data = tail + chunk
                cut = max(data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n"))
                run = len(data) - cut - 2 if cut >= 0 else run + len(chunk)
                tail = data[-3:]
            else:
                run += len(chunk)
            if run > self.cap:
                if self.trace is not None:
                    self.trace.too_large = True
                raise ResponseTooLarge(f"the server sent a message of more than {self.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class GuardedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, max_body_bytes: int) -> None:
        self.inner = inner
        self.max_body_bytes = max_body_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        trace = current_trace.get()
        try:
            try:
                response = await self.inner.handle_async_request(request)
            except _ENDED_UNANSWERED as exc:
                if not repeatable(request):
                    raise
                logger.info(
                    "%s %s: the connection ended unanswered (%r); sending it again", request.method, request.url, exc
                )
                response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            if trace is not None:
                trace.connect_failed = True
                trace.error = f"{type(exc).__name__}: {exc}"
            raise
        except httpx2.TransportError as exc:
            if trace is not None and request.method == "POST":
                trace.sent = True
                trace.error = f"{type(exc).__name__}: {exc}"
            raise
        if trace is not None and request.method == "POST":
            trace.sent = True
            trace.status = response.status_code
            if response.status_code in (401, 403):
                trace.auth_status = response.status_code
        content_type = response.headers.get("content-type", "").lower()
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        capped = _CappedStream(
            response.stream, self.max_body_bytes, content_type.startswith("text/event-stream"), trace
        )
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=capped,
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every server: building one reads the CA bundle (about
    25 ms of CPU), which a host with a hundred servers would otherwise pay per connection."""
    return httpx2.create_ssl_context()


def make_http_client(
    headers: dict[str, str] | None = None,
    *,
    max_body_bytes: int,
    timeout: float = 30.0,
    read_timeout: float = 300.0,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An AsyncClient for one MCP server: its headers, our caps, the SDK's timeouts."""
    transport = GuardedTransport(
        httpx2.AsyncHTTPTransport(
            retries=0,
            verify=_ssl_context(),
            limits=httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY),
        ),
        max_body_bytes,
    )
    return httpx2.AsyncClient(
        headers=headers or {},
        timeout=httpx2.Timeout(timeout, read=read_timeout),
        transport=transport,
        auth=auth,
    )
