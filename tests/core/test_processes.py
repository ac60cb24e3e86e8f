"""This process as the database knows it (hostapp/core/processes.py): a row that is
refreshed while the process lives and goes when it stops."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from hostapp.core import identity, processes
from hostapp.core.models import Process
from tests.helpers import wait_until

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
