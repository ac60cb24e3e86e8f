"""A tiny authenticating reverse proxy for the conformance suite.

The conformance CLI (0.1.16 and 0.2.0-alpha.12) has no option to send a header in server
mode and reads no environment variable for one (`server --help` lists only --url,
--scenario, --suite, --expected-failures, -o, --spec-version, --verbose, and in the
modern version --force, --requirements and --timeout; the only variable either bundle
reads is GITHUB_TOKEN, for `tier-check`). The agents' endpoint answers 401 without a
bearer token, so the suite talks to this proxy on 127.0.0.1, which adds
`Authorization: Bearer <token>` and forwards everything else unchanged: method, path,
query, every header including `Host` and `Origin` (so `dns-rebinding-protection` still
reaches the endpoint's own checks), the body, and the response streamed back as it
comes (SSE events are not buffered). A client that disconnects ends the upstream
request too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

import httpx
import uvicorn

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "authorization",
}


class AuthProxy:
    """`AuthProxy(upstream, token)`: `start()` returns the proxy's base URL; `stop()` ends it."""

    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.requests = 0
        self._client: httpx.AsyncClient | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self._client is not None:
                        await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        assert self._client is not None
        self.requests += 1
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        headers.append(("authorization", f"Bearer {self.token}"))
        url = self.upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            upstream = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            payload = f"proxy: upstream failed: {exc!r}".encode()
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": payload})
            return

        async def pump() -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status_code,
                    "headers": [
                        (k.encode("latin-1"), v.encode("latin-1"))
                        for k, v in upstream.headers.multi_items()
                        if k.lower() not in HOP_BY_HOP
                    ],
                }
            )
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        try:
            pumping = asyncio.ensure_future(pump())
            watching = asyncio.ensure_future(disconnected())
            done, pending = await asyncio.wait({pumping, watching}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            for task in done:
                if task is pumping and not task.cancelled():
                    with contextlib.suppress(OSError):  # the client went away mid-stream
                        task.result()
        finally:
            await upstream.aclose()

    def start(self) -> str:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        port = self._sock.getsockname()[1]
        config = uvicorn.Config(self, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = threading.Event()
        for _ in range(200):
            if self._server.started:
                break
            deadline.wait(0.05)
        assert self._server.started, "the proxy did not start"
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
