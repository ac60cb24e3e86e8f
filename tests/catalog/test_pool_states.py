"""What a pool reports is handled in batches: the states stored in one transaction, the
latest per server, on a thread that keeps its database session until it is idle."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection

from hostapp.catalog import pool as catalog_pool
from hostapp.catalog.models import Server
from hostapp.mcp import PoolEvent, ServerStatus

from .conftest import make_server

# The handling thread has its own session: it sees committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)


def state(name: str, value: str, **fields: Any) -> PoolEvent:
    return PoolEvent("state", name, ServerStatus(name=name, state=value, transport="stdio", enabled=True, **fields))


def handled() -> None:
    assert catalog_pool.events.flush(timeout=10)


def test_a_burst_stores_the_latest_state_of_each_server_once(sent: list[tuple[str, dict[str, Any]]]) -> None:
    for name in ("a", "b", "c"):
        make_server(name)

    for name in ("a", "b", "c"):
        catalog_pool._on_event(state(name, "connecting"))
    catalog_pool._on_event(state("a", "ready", protocol_version="2025-11-25", server_info={"name": "a"}))
    catalog_pool._on_event(state("b", "failing", last_error={"message": "refused"}))
    handled()

    servers = {s.name: s for s in Server.objects.all()}
    assert (servers["a"].state, servers["a"].protocol_version, servers["a"].server_info) == (
        "ready",
        "2025-11-25",
        {"name": "a"},
    )
    assert (servers["b"].state, servers["b"].last_error) == ("failing", {"message": "refused"})
    assert servers["c"].state == "connecting"
    # One write (and one live event) per server: the superseded "connecting" of a and b never.
    assert [(data["names"], data["state"]) for kind, data in sent if kind == "server.changed"] == [
        (["c"], "connecting"),
        (["a"], "ready"),
        (["b"], "failing"),
    ]


def test_states_within_the_window_after_a_batchs_first_are_one_write(
    monkeypatch: pytest.MonkeyPatch, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    """A new slot's "idle" and the "connecting" that follows it a moment later (a refresh
    that adds a server to the pool and connects it) are stored, and sent, once."""
    make_server("a")
    monkeypatch.setattr(catalog_pool, "WINDOW", 0.5)  # wide, for a slow machine
    catalog_pool._on_event(state("a", "idle"))
    time.sleep(0.05)  # the thread has the first event by now, and waits out the window
    catalog_pool._on_event(state("a", "connecting"))
    handled()

    assert Server.objects.get(name="a").state == "connecting"
    assert [(data["names"], data["state"]) for kind, data in sent if kind == "server.changed"] == [
        (["a"], "connecting")
    ]


def test_a_state_for_a_server_that_is_gone_is_dropped_and_the_others_stored() -> None:
    make_server("a")
    catalog_pool._on_event(state("gone", "ready"))
    catalog_pool._on_event(state("a", "ready"))
    handled()

    assert Server.objects.get(name="a").state == "ready"


def test_the_handling_thread_closes_its_session_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    make_server("a")
    sessions: list[bool] = []
    record = catalog_pool._handle_events

    def watched(batch: list[PoolEvent]) -> None:
        sessions.append(connection.connection is not None)
        record(batch)

    monkeypatch.setattr(catalog_pool.events, "_handle", watched)
    catalog_pool.events.stop()
    catalog_pool._on_event(state("a", "connecting"))
    handled()
    catalog_pool._on_event(state("a", "ready"))
    handled()
    time.sleep(catalog_pool.IDLE_CLOSE + 0.5)
    catalog_pool._on_event(state("a", "idle"))
    handled()

    assert sessions == [False, True, False]
    assert Server.objects.get(name="a").state == "idle"
