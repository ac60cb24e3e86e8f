"""The states a pool reports are stored per burst: the latest per server, in one transaction."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hostapp.catalog import pool as catalog_pool
from hostapp.catalog.models import Server
from hostapp.mcp import PoolEvent, ServerStatus

from .conftest import make_server

# The pool's event thread has its own session (and closes it): it sees committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)


def state(name: str, value: str, **fields: Any) -> PoolEvent:
    return PoolEvent("state", name, ServerStatus(name=name, state=value, transport="stdio", enabled=True, **fields))


def on_event_thread(fn: Callable[[], Any]) -> Any:
    """Run `fn` on a thread of its own, as the pool's event thread runs the listener."""
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        return executor.submit(fn).result(timeout=30)


def updates(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if q["sql"].upper().startswith("UPDATE")]


@pytest.fixture(autouse=True)
def no_states_held() -> Any:
    yield
    catalog_pool._states.clear()


def test_a_burst_is_stored_when_it_is_over_with_the_latest_state_of_each_server(
    sent: list[tuple[str, dict[str, Any]]],
) -> None:
    for name in ("a", "b", "c"):
        make_server(name)

    def burst() -> tuple[list[str], list[str]]:
        with CaptureQueriesContext(connection) as ctx:
            for name in ("a", "b", "c"):
                catalog_pool._on_event(state(name, "connecting"))
            catalog_pool._on_event(state("a", "ready", protocol_version="2025-11-25", server_info={"name": "a"}))
            catalog_pool._on_event(state("b", "failing", last_error={"message": "refused"}))
            held = updates(ctx)
            catalog_pool._events_idle()
            return held, updates(ctx)

    held, stored = on_event_thread(burst)

    assert held == []  # held while the burst lasts
    assert len(stored) == 3  # one per server, not one per event
    servers = {s.name: s for s in Server.objects.all()}
    assert (servers["a"].state, servers["a"].protocol_version, servers["a"].server_info) == (
        "ready",
        "2025-11-25",
        {"name": "a"},
    )
    assert (servers["b"].state, servers["b"].last_error) == ("failing", {"message": "refused"})
    assert servers["c"].state == "connecting"
    assert [(kind, data["names"], data["state"]) for kind, data in sent if kind == "server.changed"] == [
        ("server.changed", ["c"], "connecting"),
        ("server.changed", ["a"], "ready"),
        ("server.changed", ["b"], "failing"),
    ]


def test_states_are_stored_while_events_keep_coming(monkeypatch: pytest.MonkeyPatch) -> None:
    make_server("a")
    monkeypatch.setattr(catalog_pool, "STATES_HELD_MAX", 0.05)

    def events() -> None:
        catalog_pool._on_event(state("a", "connecting"))
        time.sleep(0.1)
        catalog_pool._on_event(state("a", "ready"))  # no idle in between: held too long, stored

    on_event_thread(events)

    assert Server.objects.get(name="a").state == "ready"
    assert catalog_pool._states == {}


def test_a_state_for_a_server_that_is_gone_is_dropped() -> None:
    make_server("a")

    def events() -> None:
        catalog_pool._on_event(state("gone", "ready"))
        catalog_pool._on_event(state("a", "ready"))
        catalog_pool._events_idle()

    on_event_thread(events)

    assert Server.objects.get(name="a").state == "ready"
