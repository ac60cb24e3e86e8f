"""The host the security suite attacks: `manage.py run` on a data dir seeded with secrets.

One per test session (see conftest.py): SQLite and an embedded Redis, web and a worker,
JSON logs at DEBUG, a known SECRET_KEY and metrics token, the hostile server over stdio
(with a secret in its environment) and over HTTP (with a secret header), an administrator
and an agent token (seed.py). Everything the group prints is kept in `lines`, so a test can
scan it for secrets.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx

from tests.helpers import PYTHON, REPO, clean_env, free_port, stop_process, wait_until
from tests.host import login

from .seed import ADMIN

HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")


class SecureHost:
    def __init__(self, data_dir: Path, secrets: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.secrets = secrets
        self.port = free_port()
        self.lines: list[str] = []
        self.record = data_dir / "received.jsonl"
        self.env = clean_env(
            PATCHBAY_DATA_DIR=str(data_dir),
            DATABASE_URL=None,
            REDIS_URL=None,
            PATCHBAY_DEBUG=None,
            DEBUG=None,
            SECRET_KEY=secrets["SECRET_KEY"],
            PATCHBAY_METRICS_TOKEN=secrets["METRICS_TOKEN"],
            PATCHBAY_LOG_JSON="1",
            PATCHBAY_LOG_LEVEL="DEBUG",
        )
        self.token = ""
        self.http_server: subprocess.Popen[bytes] | None = None
        self.proc: subprocess.Popen[str] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        http_port = free_port()
        self.http_server = subprocess.Popen(
            [PYTHON, str(HOSTILE_SERVER), "--http", str(http_port), "--record", str(self.record)],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: _listening(http_port), timeout=30, what="the hostile HTTP server")
        config = self.data_dir / "servers.json"
        config.write_text(
            json.dumps(
                {
                    "mcpServers": {
                        "hostile": {
                            "command": PYTHON,
                            "args": [str(HOSTILE_SERVER), "--record", str(self.record)],
                            "env": {"API_TOKEN": self.secrets["ENV"]},
                            "trusted": True,
                        },
                        "hostile-http": {
                            "type": "http",
                            "url": f"http://127.0.0.1:{http_port}/mcp",
                            "headers": {"Authorization": self.secrets["HEADER"]},
                            "trusted": True,
                        },
                    }
                }
            )
        )
        seeded = subprocess.run(
            [PYTHON, "-m", "tests.security.seed", str(config)],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert seeded.returncode == 0, f"seeding failed:\n{seeded.stdout}{seeded.stderr}"
        *printed, last = seeded.stdout.strip().splitlines()
        self.token = json.loads(last)["token"]
        # The seed's logs are scanned with the host's; the line that hands over the token is not.
        self.lines += [*(line + "\n" for line in printed), seeded.stderr]
        assert "created: hostile, hostile-http" in seeded.stdout, seeded.stdout
        self.proc = subprocess.Popen(
            [PYTHON, "manage.py", "run", "--port", str(self.port), "--no-beat", "--concurrency", "2"],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, f"run exited early:\n{self.output}"
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        wait_until(ready, timeout=90, what=f"the web process to answer\n{self.output}")
        wait_until(lambda: "worker@" in self.output, timeout=60, what=f"the worker to start\n{self.output}")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                if self.proc.poll() is None:
                    os.kill(self.proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=30)
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        if self.http_server is not None:
            stop_process(self.http_server)

    # --- use --------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def received(self) -> list[dict[str, str | None]]:
        """What the hostile server was given to reach it (its env over stdio, its header over HTTP)."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def password(self, username: str) -> str:
        assert username == ADMIN[0], "the host has one person: the administrator"
        return ADMIN[1]

    def login(self, username: str = "admin") -> httpx.Client:
        """An HTTP client logged in through the login page (session and CSRF cookies)."""
        return login(self.url, username, self.password(username), timeout=15)

    def agent_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=15)

    def call_over_mcp(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call a tool through /mcp as the agent, with the MCP SDK's client; the CallToolResult."""
        return anyio.run(self._call_over_mcp, tool, arguments)

    async def _call_over_mcp(self, tool: str, arguments: dict[str, Any]) -> Any:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
        async with (
            http,
            streamable_http_client(f"{self.url}/mcp", http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(tool, arguments)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
