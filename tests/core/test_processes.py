"""This process as the database knows it (hostapp/core/processes.py): a row that is
refreshed while the process lives and goes when it stops."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from hostapp.core import identity, processes
from hostapp.core.models import Process
from tests.helpers import PYTHON, REPO, clean_env, wait_until

pytestmark = pytest.mark.django_db(transaction=True)  # the heartbeat has a session of its own


def test_a_process_registers_as_what_it_is_and_its_row_goes_when_it_stops() -> None:
    before = identity.role()
    identity.set_role(identity.WORKER)
    try:
        process = processes.register()
        assert (process.role, process.pid, process.name) == ("worker", os.getpid(), identity.name())
        assert process.name.startswith("worker@")
        processes.unregister()
    finally:
        identity.set_role(before)
    assert not Process.objects.exists()


def test_the_heartbeat_keeps_the_row_fresh_and_brings_it_back_if_it_was_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "BEAT", 0.1)
    processes.unregister()  # a heartbeat at the new pace
    processes.register()
    long_ago = timezone.now() - timedelta(hours=1)
    Process.objects.update(seen_at=long_ago)
    wait_until(lambda: Process.objects.get().seen_at > long_ago, timeout=10, what="a beat")

    Process.objects.all().delete()  # forgotten by the sweeper during a long pause, say
    wait_until(lambda: Process.objects.filter(name=identity.name()).exists(), timeout=10, what="the row again")
    processes.unregister()


def test_a_forked_child_is_another_process() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own name, nothing of the parent's heartbeat
        os.close(read)
        os.write(write, identity.name().encode())
        os._exit(0)
    os.close(write)
    child_name = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child_name == identity.name().replace(f":{os.getpid()}", f":{pid}")


def test_pages_count_a_process_alive_while_it_beats() -> None:
    processes.register()
    assert Process.objects.filter(seen_at__gte=processes.alive_since()).count() == 1
    Process.objects.update(seen_at=timezone.now() - processes.STALE - timedelta(seconds=1))
    assert not Process.objects.filter(seen_at__gte=processes.alive_since()).exists()
    processes.unregister()


def test_a_command_that_held_a_pool_leaves_no_row_of_its_own_behind(tmp_path: Path) -> None:
    """`mcp import --refresh` starts a server, stores what its pool saw of it, and exits:
    its process row, and with it what it reported, is gone (its own data directory)."""
    env = clean_env(PATCHBAY_DATA_DIR=str(tmp_path), DATABASE_URL=None, REDIS_URL=None)
    config = tmp_path / "mcp.json"
    hostile = str(REPO / "tests" / "fixtures" / "hostile_server.py")
    config.write_text(json.dumps({"mcpServers": {"well": {"command": sys.executable, "args": [hostile, "well"]}}}))
    for args in (["migrate", "-v0"], ["mcp", "import", str(config), "--refresh"]):
        run = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=200
        )
        assert run.returncode == 0, run.stderr
    with contextlib.closing(sqlite3.connect(tmp_path / "patchbay.sqlite3")) as db:
        assert db.execute("SELECT count(*) FROM catalog_tool").fetchone() == (5,)
        assert db.execute("SELECT count(*) FROM core_process").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM catalog_serverstate").fetchone() == (0,)


def test_a_process_under_the_name_of_one_that_died_replaces_its_row() -> None:
    """A container restarted keeps its hostname and pid 1: the new process's first
    registration takes the name over, without the dead one's start or states."""
    long_ago = timezone.now() - timedelta(days=1)
    Process.objects.create(
        name=identity.name(),
        role=identity.role(),
        hostname=socket.gethostname(),
        pid=os.getpid(),
        started_at=long_ago,
        seen_at=long_ago,
    )
    processes.unregister()  # as a new process: not registered yet
    process = processes.register()
    assert process.started_at > long_ago
    assert Process.objects.count() == 1
    processes.unregister()
