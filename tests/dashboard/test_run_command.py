"""`manage.py run` as a user runs it: one group that starts, serves, and stops entirely."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.helpers import PYTHON, REPO, clean_env, process_gone, wait_until
from tests.host import RunningHost

pytestmark = pytest.mark.slow


# The host's own processes, by a part of their command lines.
NAMES = {"web": "hostapp.core.web", "worker": "hostapp worker", "beat": "hostapp beat"}


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_run_starts_everything_logs_in_and_stops_the_whole_group_on_sigterm(tmp_path: Path) -> None:
    host = RunningHost(tmp_path)
    try:
        host.wait_ready()
        wait_until(
            lambda: "worker@" in host.output and "beat: Starting" in host.output, timeout=60, what="worker and beat"
        )
        out = host.output
        assert f"Patchbay is starting at {host.url}/" in out
        password = re.search(r"password: (\S+)", out)
        assert password, out
        creds = tmp_path / "admin-credentials.txt"
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600
        assert f"password: {password.group(1)}" in creds.read_text()
        assert str(creds) in out

        client = host.http_client(password=password.group(1))
        home = client.get("/")
        for section in ("Servers", "Catalog", "Calls", "Outbox"):
            assert re.search(rf'<a href="/{section.lower()}/"[^>]*>{section}\b', home.text), section

        # The first run imported servers/mcp.json and the worker listed their tools.
        assert "Imported the bundled servers from servers/mcp.json" in host.output
        wait_until(lambda: "mailbox__send" in client.get("/catalog/").text, timeout=60, what="a populated catalog")

        # Routine tasks that did nothing leave no line: ready means a heartbeat ran.
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout=60, what="a worker heartbeat")
        assert "Sending due task worker-heartbeat" not in host.output
        assert "hostapp.core.tasks.heartbeat[" not in host.output

        # The access log keeps credentials out of query strings (an OAuth callback's code).
        client.get("/oauth/callback/?code=c0de-SECRET-1&state=st4te-SECRET-2&iss=https%3A%2F%2Fas.example")
        wait_until(lambda: "GET /oauth/callback/?" in host.output, timeout=10, what="the access log line")
        logged = next(line for line in host.lines if "GET /oauth/callback/?" in line)
        assert "code=[redacted]&state=[redacted]&iss=https%3A%2F%2Fas.example" in logged, logged
        assert "SECRET" not in host.output

        procs = _descendants(host.proc.pid)
        names = " ".join(" ".join(p.cmdline()) for p in procs)
        for part in ("redis-server", "hostapp.core.web", "worker", "beat", "servers.mailbox", "servers.tasks"):
            assert part in names, names
        assert (tmp_path / "redis.sock").exists()

        # Each of the host's processes writes its threads' stacks when asked, as the
        # supervisor does before it kills one stuck in its stop, and goes on running.
        from hostapp.core.supervisor import STACKS_SIGNAL

        for child in psutil.Process(host.proc.pid).children():
            cmdline = " ".join(child.cmdline())
            name = next((n for n, part in NAMES.items() if part in cmdline), None)
            if name is None:
                continue
            child.send_signal(STACKS_SIGNAL)
            label = f"{name:>6} | "
            wait_until(
                lambda label=label: any(
                    line.startswith(label) and "most recent call first" in line for line in host.lines
                ),
                timeout=10,
                what=f"{name}'s stacks",
            )
            assert not process_gone(child.pid), name

        assert host.signal_and_wait(signal.SIGTERM) == 0
        gone, alive = psutil.wait_procs(procs, timeout=10)
        assert not alive, [p.cmdline() for p in alive]
        assert not _group_alive(host.proc.pid)
        assert "Stopped." in host.output
    finally:
        host.kill_group()


def test_a_second_run_does_not_show_the_password_again(tmp_path: Path) -> None:
    first = RunningHost(tmp_path, "--no-worker", "--no-beat")
    try:
        first.wait_ready()
        assert "password:" in first.output
        assert first.signal_and_wait(signal.SIGINT) == 0
    finally:
        first.kill_group()
    second = RunningHost(tmp_path, "--no-worker", "--no-beat")
    try:
        second.wait_ready()
        assert "password:" not in second.output
        assert "Admin credentials from the first run are kept in" in second.output
        assert second.signal_and_wait() == 0
    finally:
        second.kill_group()


def test_run_refuses_a_port_in_use(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = clean_env(PATCHBAY_DATA_DIR=str(tmp_path), DATABASE_URL=None, REDIS_URL=None)
        result = subprocess.run(
            [PYTHON, "manage.py", "run", "--port", str(port)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_supervisor_sweeps_orphans_left_in_other_sessions(tmp_path: Path) -> None:
    """A child that starts a process in its own session and dies must not leave it running."""
    marker = tmp_path / "orphan.pid"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from hostapp.core.supervisor import ChildSpec, Supervisor, become_subreaper
        assert become_subreaper()
        leaver = (
            "import subprocess, sys; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); "
            "open({str(marker)!r}, 'w').write(str(p.pid))"
        )
        sup = Supervisor(env=dict(__import__('os').environ))
        sup.start(ChildSpec("leaver", [sys.executable, "-c", leaver], restart=False))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if open({str(marker)!r}).read():
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        time.sleep(0.5)
        sup.stop_all()
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, env=clean_env(), check=True, timeout=60)
    orphan = int(marker.read_text())
    wait_until(
        lambda: process_gone(orphan),
        timeout=10,
        what="the orphan to be gone",
    )


def test_a_killed_supervisor_leaves_no_process_running(tmp_path: Path) -> None:
    """SIGKILL gives the supervisor no chance to stop anything: the kernel tells each child,
    and each shuts down as on a normal stop (the web and worker stop their MCP servers); one
    still running after its grace is killed by its warden."""
    host = RunningHost(tmp_path)
    procs: list[psutil.Process] = []
    try:
        host.wait_ready()
        wait_until(lambda: "worker@" in host.output, timeout=60, what="the worker")
        procs = _descendants(host.proc.pid)
        names = " ".join(" ".join(p.cmdline()) for p in procs)
        for part in ("redis-server", "hostapp.core.web", "worker", "beat"):
            assert part in names, names
        os.kill(host.proc.pid, signal.SIGKILL)
        host.proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(procs, timeout=45)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        host.kill_group()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_a_child_whose_program_does_not_exist_is_refused_at_once() -> None:
    from hostapp.core.supervisor import ChildSpec, Supervisor

    sup = Supervisor(env=dict(os.environ))
    with pytest.raises(FileNotFoundError, match="no such program: no-such-program-patchbay"):
        sup.start(ChildSpec("ghost", ["no-such-program-patchbay", "--flag"]))
    assert sup.children == []


def test_a_stop_right_after_read_only_answers_loses_none_of_their_rows(tmp_path: Path) -> None:
    """SIGTERM at once after forty read-only calls from an agent: every call the agent got
    an answer for is in the ledger after the stop. (Killed outright, too:
    tests/gateway/test_killed_web.py.)"""
    import asyncio
    import json

    import httpx2
    import mcp
    from mcp.client.streamable_http import streamable_http_client

    host = RunningHost(tmp_path, "--no-beat")
    try:
        host.wait_ready()
        host.wait_for_tools("mailbox__read")
        token = json.loads(host.manage("mcp", "token", "create", "stopper", "--json"))["token"]

        async def calls() -> int:
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as http,
                mcp.Client(streamable_http_client(f"{host.url}/mcp", http_client=http), mode="auto") as client,
            ):
                answered = 0
                for _ in range(40):
                    result = await client.call_tool("mailbox__read", {"message_id": "msg-0001"})
                    assert not result.is_error, result
                    answered += 1
                return answered

        answered = asyncio.run(calls())
        assert host.signal_and_wait(signal.SIGTERM) == 0
        rows = json.loads(host.manage("mcp", "calls", "--json", "--limit", "100"))
        mine = [r for r in rows if r["requester"] == "stopper"]
        assert len(mine) == answered, host.output
        assert {r["status"] for r in mine} == {"succeeded"}
    finally:
        host.kill_group()
