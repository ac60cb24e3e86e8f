"""A call's page hears what its server says while the call runs (hostapp/calls/actions.py
`shown`): `call.progress` and `call.log` events on the live group, as the page's script reads
them, from the conformance fixture (tests/fixtures/conformance_server.py, Streamable HTTP,
a 2026-07-28 server): its `test_tool_with_progress` reports three steps and
`test_tool_with_logging` logs three info lines (each heard: log lines are never merged). The
events are what the open pages get, read from the channel layer (Redis) the way the pages'
consumer reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers

from hostapp.calls.actions import Requester, start_call
from hostapp.calls.models import Call
from hostapp.catalog import actions as catalog_actions
from hostapp.catalog.models import Server, Tool
from hostapp.catalog.pool import close_pool, refresh_server
from hostapp.core.events import LIVE_GROUP
from tests.conformance.conftest import conformance_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fixture_server() -> Iterator[Server]:
    with conformance_server() as url:
        server = Server.objects.create(name="fx", transport=Server.HTTP, url=url, trusted=True)
        result = refresh_server(server)
        assert result.ok, result.error
        for name in ("fx__test_tool_with_progress", "fx__test_tool_with_logging"):
            catalog_actions.set_class_override(Tool.objects.get(exposed_name=name), "read_only")
        yield server
        close_pool()


def _heard_during(run: Any, kinds: set[str], enough: Any) -> list[dict[str, Any]]:
    """The live events of `kinds` heard while `run()` runs in a thread, until `enough(heard)`."""

    async def listen() -> list[dict[str, Any]]:
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        channel = await layer.new_channel()
        await layer.group_add(LIVE_GROUP, channel)
        heard: list[dict[str, Any]] = []
        doing = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            async with asyncio.timeout(30):
                while not enough(heard):
                    message = await layer.receive(channel)
                    heard += [e for e in message.get("events", ()) if e["kind"] in kinds]
        finally:
            await doing
            await layer.group_discard(LIVE_GROUP, channel)
        return heard

    return asyncio.run(listen())


def test_the_page_hears_the_servers_progress_up_to_its_last_step(fixture_server: Server, admin_user: Any) -> None:
    """Steps that come within one batch of events are one event, the latest (a page shows a
    call's latest progress): the server's 50 ms between steps may or may not part them."""
    calls: list[Call] = []
    heard = _heard_during(
        lambda: calls.append(start_call("fx__test_tool_with_progress", {}, Requester.for_user(admin_user))),
        {"call.progress"},
        lambda heard: heard and heard[-1]["data"]["progress"] == 100,
    )

    [call] = calls
    assert call.status == Call.SUCCEEDED
    steps = [(e["data"]["id"], e["data"]["progress"], e["data"]["total"]) for e in heard]
    assert steps[-1] == (call.pk, 100, 100)
    assert set(steps) <= {(call.pk, 0, 100), (call.pk, 50, 100), (call.pk, 100, 100)}
    assert steps == sorted(steps), "in the order the server reported them"
    assert heard[-1]["data"]["message"] == "Completed step 100 of 100"


def test_the_page_hears_the_servers_log_lines(fixture_server: Server, admin_user: Any) -> None:
    calls: list[Call] = []
    heard = _heard_during(
        lambda: calls.append(start_call("fx__test_tool_with_logging", {}, Requester.for_user(admin_user))),
        {"call.log"},
        lambda heard: len(heard) >= 3,
    )

    [call] = calls
    assert [(e["data"]["call_id"], e["data"]["level"], e["data"]["data"]) for e in heard] == [
        (call.pk, "info", "Tool execution started"),
        (call.pk, "info", "Tool processing data"),
        (call.pk, "info", "Tool execution completed"),
    ]
