"""Every call is on record before its answer: a web process SIGKILLed the moment an agent
has its answer loses no row.

The web process (daphne, `python -m hostapp.core.web`, as `manage.py run` starts it) runs
alone on a data directory of its own (SQLite); the bundled mailbox server is imported and
listed with the CLI, as an operator would. An agent calls `mailbox__read` three times: the
first reads the policy and writes its row first; the others go straight to the server
(the endpoint's decision cache) and write their rows when the server has answered. Right
after the last answer the web process is killed outright; the ledger must hold all three,
finished, with their events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import mcp
import psutil
import pytest
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import PYTHON, REPO, clean_env, free_port, process_gone, stop_process, wait_until

pytestmark = pytest.mark.slow


def _manage(data_dir: Path, *args: str) -> str:
    env = clean_env(PATCHBAY_DATA_DIR=str(data_dir), DATABASE_URL=None, REDIS_URL=None)
    run = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False
    )
    assert run.returncode == 0, (args, run.stdout, run.stderr)
    return run.stdout


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, str, Path]]:
    """The web process alone, with the mailbox listed and an agent's token."""
    _manage(tmp_path, "migrate", "--verbosity", "0")
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {"mcpServers": {"mailbox": {"command": "python", "args": ["-m", "servers.mailbox"], "trusted": True}}}
        )
    )
    _manage(tmp_path, "mcp", "import", str(config), "--refresh")
    token = json.loads(_manage(tmp_path, "mcp", "token", "create", "reader", "--json"))["token"]
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "hostapp.core.web", "-b", "127.0.0.1", "-p", str(port), "hostapp.asgi:application"],
        cwd=REPO,
        env=clean_env(PATCHBAY_DATA_DIR=str(tmp_path), DATABASE_URL=None, REDIS_URL=None, PATCHBAY_LOG_LEVEL="ERROR"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, "the web process exited"
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        return False

    wait_until(up, timeout=60, interval=0.1, what="the web process to answer")
    children: list[psutil.Process] = []
    try:
        yield proc, url, token, tmp_path / "patchbay.sqlite3"
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            children = psutil.Process(proc.pid).children(recursive=True)
        stop_process(proc)
        for child in children:  # the mailbox server it started, if the kill left it
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


def _ledger(db: Path) -> list[tuple[int, str, list[str]]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        calls = conn.execute(
            "SELECT id, status FROM calls_call WHERE tool_name = 'mailbox__read' ORDER BY id"
        ).fetchall()
        return [
            (
                pk,
                status,
                [k for (k,) in conn.execute("SELECT kind FROM calls_callevent WHERE call_id = ? ORDER BY id", (pk,))],
            )
            for pk, status in calls
        ]


def test_a_web_process_killed_right_after_answering_an_agent_loses_no_row(web: tuple) -> None:
    proc, url, token, db = web
    answers: list[bool] = []

    async def read_three_then_kill() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            mcp.Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client,
        ):
            for _ in range(3):
                result = await client.call_tool("mailbox__read", {"message_id": "msg-0001"})
                answers.append(not result.is_error)
                if len(answers) == 3:
                    # The answer is in: kill the web process before it can do anything more.
                    proc.send_signal(signal.SIGKILL)

    with contextlib.suppress(Exception):  # the client's goodbye meets a dead server
        asyncio.run(read_three_then_kill())
    assert answers == [True, True, True]
    wait_until(lambda: proc.poll() is not None and process_gone(proc.pid), timeout=10, what="the web process gone")

    ledger = _ledger(db)
    assert len(ledger) == 3
    assert ledger == [(pk, "succeeded", ["created", "succeeded"]) for pk, _, _ in ledger]
