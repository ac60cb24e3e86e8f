"""Each process keeps its own state of each server (hostapp/catalog/states.py); the pages,
the CLI and the API show each and sum them up by the worst.

Two processes are two identities (hostapp/core/identity.py): the web process and a worker
write through the same code, each as itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from hostapp.catalog import states
from hostapp.catalog.actions import set_enabled
from hostapp.catalog.models import Server, ServerState
from hostapp.catalog.pool import close_pool, refresh_server
from hostapp.core import identity, processes
from hostapp.core.models import Process
from hostapp.mcp import ServerStatus
from tests.helpers import REPO, wait_until

from .conftest import make_server

HOSTILE = str(REPO / "tests" / "fixtures" / "hostile_server.py")


@pytest.fixture
def as_process() -> Iterator[Any]:
    """Report as a process of a given role (this one's identity is put back afterwards)."""
    before = identity.role()

    def report(role: str, name: str, state: str, **fields: Any) -> None:
        identity.set_role(role)
        states.record_statuses([ServerStatus(name=name, state=state, transport="stdio", enabled=True, **fields)])

    yield report
    identity.set_role(before)


@pytest.mark.django_db
def test_two_processes_that_see_a_server_differently_are_both_shown_and_the_worst_sums_it_up(
    as_process: Any, admin_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    make_server("files")
    as_process("web", "files", "ready")
    as_process("worker", "files", "failing", last_error={"message": "connection refused", "reason": "refused"})

    server = Server.objects.get(name="files")
    assert [(s.process.role, s.state) for s in server.process_states] == [("worker", "failing"), ("web", "ready")]
    assert server.state == "failing"
    assert server.last_error == {"message": "connection refused", "reason": "refused"}

    page = admin_client.get("/servers/").content.decode()
    row = page[page.index('id="server-files"') :]
    assert 'badge state-failing">failing' in row
    assert "web</span> <span" in row and 'state-ready" title="web@' in row
    assert "worker</span> <span" in row and 'state-failing" title="worker@' in row

    detail = admin_client.get("/servers/files/").content.decode()
    assert f"<code>{identity.WEB}@" in detail and f"<code>{identity.WORKER}@" in detail
    assert "connection refused" in detail
    assert "the worst of 2 processes" in detail

    call_command("mcp", "servers", "--json")
    [row_json] = json.loads(capsys.readouterr().out)
    assert row_json["state"] == "failing"
    assert [(p["role"], p["state"], p["last_error"]) for p in row_json["processes"]] == [
        ("worker", "failing", "connection refused"),
        ("web", "ready", None),
    ]

    api = admin_client.get("/api/v1/servers/files").json()
    assert api["state"] == "failing"
    assert [(p["role"], p["state"]) for p in api["processes"]] == [("worker", "failing"), ("web", "ready")]


@pytest.mark.django_db
def test_a_process_not_seen_lately_is_left_out_and_forgotten_later(as_process: Any) -> None:
    make_server("files")
    as_process("web", "files", "ready")
    as_process("worker", "files", "failing")
    worker = Process.objects.get(role="worker")

    Process.objects.filter(pk=worker.pk).update(seen_at=timezone.now() - processes.STALE - timedelta(seconds=1))
    server = Server.objects.get(name="files")
    assert [s.process.role for s in server.process_states] == ["web"]
    assert server.state == "ready"
    assert processes.forget_gone() == 0  # gone from the pages, not forgotten yet

    Process.objects.filter(pk=worker.pk).update(seen_at=timezone.now() - processes.FORGET - timedelta(seconds=1))
    assert processes.forget_gone() == 1
    assert list(ServerState.objects.values_list("process__role", flat=True)) == ["web"]


@pytest.mark.django_db
def test_a_changed_configuration_forgets_what_every_process_saw_of_the_old_one(as_process: Any) -> None:
    server = make_server("files")
    as_process("web", "files", "failing")
    as_process("worker", "files", "disabled")

    set_enabled(server, False)
    assert not ServerState.objects.exists()
    assert Server.objects.get(name="files").state == "disabled"
    as_process("worker", "files", "disabled")
    set_enabled(server, True)  # no process's "disabled" outlives the switch
    assert Server.objects.get(name="files").state == "idle"


@pytest.mark.django_db
def test_a_server_waits_for_a_person_if_any_process_says_so(as_process: Any) -> None:
    make_server("notes", transport=Server.HTTP, command="", url="https://notes.example/mcp")
    as_process("web", "notes", "needs-authorization")
    as_process("worker", "notes", "crash-looping")
    server = Server.objects.get(name="notes")
    assert server.state == "crash-looping" and server.needs_authorization


@pytest.mark.django_db
def test_a_server_no_process_holds_is_idle_and_a_disabled_one_disabled() -> None:
    server = make_server("files")
    assert (server.state, server.process_states, server.last_error) == ("idle", [], None)
    server.enabled = False
    assert server.state == "disabled"


@pytest.mark.django_db(transaction=True)
def test_a_server_whose_listing_is_refused_is_degraded_with_the_reason_not_ready(settings: Any) -> None:
    """A 9 MiB listing against the default 8 MiB cap: the server answers, the refresh fails,
    and the Servers page says so (not `ready` with no tools)."""
    server = Server.objects.create(name="huge", command=sys.executable, args=[HOSTILE, "oversized"], trusted=True)
    try:
        result = refresh_server(server)
        assert not result.ok and "bytes" in result.error

        def settled() -> Server:
            fresh = Server.objects.get(pk=server.pk)
            return fresh if fresh.state not in ("idle", "connecting", "ready") else None  # type: ignore[return-value]

        fresh = wait_until(settled, timeout=20, what="the refused listing on record")
        assert fresh.state == "degraded"
        assert fresh.last_error is not None and fresh.last_error["reason"] == "message_too_large"
        assert fresh.stale and "bytes" in fresh.refresh_error
        assert fresh.tools.count() == 0
    finally:
        close_pool()
