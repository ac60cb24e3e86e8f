"""Fixtures for the bundled MCP servers: real subprocesses, the SDK's real `mcp.Client`.

These tests need neither Django nor a database. The test process never imports the `servers`
package: the servers run as `python -m servers.<name>` from the repository root, the way a host
launches them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, ToolAnnotations

from tests.helpers import stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
EXTENSION_ID = "dev.patchbay/idempotency"
META_KEY = "dev.patchbay/idempotencyKey"
EXTENSION_SETTINGS = {"metaKey": META_KEY}
MODES = ("auto", "legacy")
MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
STARTUP_DEADLINE = 20.0


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Module scope, so module-scoped async fixtures (one server per module and mode) work."""
    return "asyncio"


def stdio_params(
    server: str, data_dir: Path | None, *extra: str, env: dict[str, str] | None = None
) -> StdioServerParameters:
    args = ["-m", f"servers.{server}"]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    return StdioServerParameters(command=sys.executable, args=[*args, *extra], cwd=str(REPO_ROOT), env=env)


@asynccontextmanager
async def stdio_client(server: str, data_dir: Path, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(stdio_params(server, data_dir), mode=mode, read_timeout_seconds=30) as client:  # type: ignore[arg-type]
        yield client


def key_meta(key: str) -> dict[str, Any]:
    return {META_KEY: key}


def new_key() -> str:
    return f"test-{uuid.uuid4()}"


def unique(text: str) -> str:
    """A subject/title no other test uses, so effects can be counted on a shared server."""
    return f"{text} {uuid.uuid4().hex[:10]}"


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call (and a check that the text content mirrors it)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.content, "the SDK's text content is missing"
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    """The message of a tool error (an `isError` result, not a protocol error)."""
    assert result.is_error, result
    return " ".join(getattr(block, "text", "") for block in result.content)


def annotations_of(tool_annotations: ToolAnnotations | None) -> dict[str, bool | None]:
    assert tool_annotations is not None
    return {
        "read_only": tool_annotations.read_only_hint,
        "destructive": tool_annotations.destructive_hint,
        "idempotent": tool_annotations.idempotent_hint,
        "open_world": tool_annotations.open_world_hint,
    }


READ = {"read_only": True, "destructive": False, "idempotent": True, "open_world": False}


def advertised(client: Client) -> dict[str, Any]:
    """Where the idempotency ad was found: {'extensions': settings|None, 'experimental': settings|None}."""
    capabilities = client.server_capabilities
    return {
        "extensions": (capabilities.extensions or {}).get(EXTENSION_ID),
        "experimental": (capabilities.experimental or {}).get(EXTENSION_ID),
    }


# --- HTTP servers ---


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class HttpServer:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


def _wait_until_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stderr = log.read_text(errors="replace")
            raise RuntimeError(f"server exited with {process.returncode} before listening:\n{stderr}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"server did not listen on port {port} within {STARTUP_DEADLINE} s")


@contextmanager
def http_server(server: str, data_dir: Path) -> Iterator[HttpServer]:
    """Start `python -m servers.<server> --transport http` on a free loopback port; stop it afterwards."""
    port = free_port()
    log = data_dir / f"{server}-http-{port}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", f"servers.{server}", "--transport", "http", "--port", str(port)]
            + ["--data-dir", str(data_dir)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        _wait_until_listening(process, port, log)
        yield HttpServer(process, port)
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def http_mailbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    with http_server("mailbox", tmp_path_factory.mktemp("http-mailbox")) as running:
        yield running
