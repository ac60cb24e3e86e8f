"""The calendar server over stdio, in both protocol eras (one server process per era for the module).

The seeded events sit in May 2026; tests that create events use their own dates in 2027, so
they share the server without disturbing the seeded range.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client

from .conftest import MODES, READ, annotations_of, error_text, key_meta, new_key, ok, stdio_client, unique

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=MODES)
async def calendar(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    async with stdio_client("calendar", tmp_path_factory.mktemp("calendar"), request.param) as client:
        yield client


def event_arguments(title: str, **overrides: Any) -> dict[str, Any]:
    return {"title": title, "start": "2027-03-01T10:00:00+01:00", "end": "2027-03-01T11:00:00+01:00", **overrides}


async def titled(client: Client, title: str) -> list[dict[str, Any]]:
    listing = ok(await client.call_tool("list", {"include_cancelled": True}))
    return [event for event in listing["events"] if event["title"] == title]


# --- Listing: names, titles, annotations, schemas ---


async def test_the_tools_are_list_create_and_cancel(calendar: Client) -> None:
    tools = (await calendar.list_tools()).tools
    assert sorted(tool.name for tool in tools) == ["cancel", "create", "list"]


async def test_every_tool_has_a_title_a_description_and_an_output_schema(calendar: Client) -> None:
    tools = (await calendar.list_tools()).tools
    assert {tool.name: tool.title for tool in tools} == {
        "list": "List events",
        "create": "Create event",
        "cancel": "Cancel event",
    }
    for tool in tools:
        assert tool.description and len(tool.description) > 30, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name


async def test_list_is_annotated_as_a_closed_world_idempotent_read(calendar: Client) -> None:
    tools = {tool.name: tool for tool in (await calendar.list_tools()).tools}
    assert annotations_of(tools["list"].annotations) == READ


async def test_create_is_a_non_destructive_write_and_cancel_a_destructive_one(calendar: Client) -> None:
    tools = {tool.name: tool for tool in (await calendar.list_tools()).tools}
    create, cancel = annotations_of(tools["create"].annotations), annotations_of(tools["cancel"].annotations)
    assert (create["read_only"], create["destructive"]) == (False, False)
    assert (cancel["read_only"], cancel["destructive"]) == (False, True)


# --- list ---


async def test_a_new_calendar_is_seeded_with_sample_events_in_start_order(calendar: Client) -> None:
    listing = ok(await calendar.call_tool("list", {"start": "2026-05-01", "end": "2026-05-31"}))
    assert [event["id"] for event in listing["events"]] == ["evt-0001", "evt-0002", "evt-0003", "evt-0004"]
    assert listing["events"][0]["title"] == "Weekly team sync"


async def test_list_returns_the_events_overlapping_a_date_range(calendar: Client) -> None:
    listing = ok(await calendar.call_tool("list", {"start": "2026-05-05", "end": "2026-05-07"}))
    assert [event["title"] for event in listing["events"]] == ["Customs call re shipment 88213", "Q3 budget review"]
    assert listing["total"] == 2
    assert listing["start"] == "2026-05-05T00:00:00+00:00"
    assert listing["end"] == "2026-05-08T00:00:00+00:00"  # a date as end includes that whole day


async def test_listing_a_range_that_ends_before_it_starts_is_a_tool_error(calendar: Client) -> None:
    result = await calendar.call_tool("list", {"start": "2026-05-07T12:00:00Z", "end": "2026-05-07T09:00:00Z"})
    assert "must be after its start" in error_text(result)


async def test_listing_with_a_malformed_date_is_a_tool_error(calendar: Client) -> None:
    result = await calendar.call_tool("list", {"start": "next tuesday"})
    assert "Invalid start 'next tuesday'" in error_text(result)


# --- create, cancel ---


async def test_create_adds_a_confirmed_event(calendar: Client) -> None:
    title = unique("Design review")
    event = ok(
        await calendar.call_tool(
            "create",
            event_arguments(title, attendees=["lee@example.com", "lee@example.com"], location="Oak room"),
        )
    )
    assert event["id"].startswith("evt-")
    assert event["status"] == "confirmed"
    assert (event["start"], event["end"]) == ("2027-03-01T10:00:00+01:00", "2027-03-01T11:00:00+01:00")
    assert event["attendees"] == ["lee@example.com"]
    assert event["location"] == "Oak room"
    assert await titled(calendar, title) == [event]


async def test_a_time_without_an_offset_is_taken_as_utc(calendar: Client) -> None:
    event = ok(
        await calendar.call_tool(
            "create", event_arguments(unique("Naive"), start="2027-03-02T09:00", end="2027-03-02T09:30")
        )
    )
    assert (event["start"], event["end"]) == ("2027-03-02T09:00:00+00:00", "2027-03-02T09:30:00+00:00")


async def test_creating_an_event_that_ends_before_it_starts_is_a_tool_error(calendar: Client) -> None:
    title = unique("Backwards")
    result = await calendar.call_tool(
        "create", event_arguments(title, start="2027-03-01T11:00:00+01:00", end="2027-03-01T10:00:00+01:00")
    )
    assert "must be after its start" in error_text(result)
    assert await titled(calendar, title) == []


async def test_creating_an_event_with_a_malformed_start_is_a_tool_error(calendar: Client) -> None:
    result = await calendar.call_tool("create", event_arguments(unique("Bad start"), start="tomorrow 10am"))
    assert "Invalid start 'tomorrow 10am'" in error_text(result)


async def test_cancel_marks_the_event_cancelled_and_hides_it_from_the_default_list(calendar: Client) -> None:
    title = unique("Cancelled standup")
    event = ok(
        await calendar.call_tool(
            "create", event_arguments(title, start="2027-04-01T09:00:00Z", end="2027-04-01T09:15:00Z")
        )
    )
    cancelled = ok(await calendar.call_tool("cancel", {"event_id": event["id"]}))
    assert cancelled == {"event": {**event, "status": "cancelled"}, "already_cancelled": False}
    default = ok(await calendar.call_tool("list", {"start": "2027-04-01", "end": "2027-04-01"}))
    assert event["id"] not in {item["id"] for item in default["events"]}
    everything = ok(
        await calendar.call_tool("list", {"start": "2027-04-01", "end": "2027-04-01", "include_cancelled": True})
    )
    assert event["id"] in {item["id"] for item in everything["events"]}
    again = ok(await calendar.call_tool("cancel", {"event_id": event["id"]}))
    assert again["already_cancelled"] is True


async def test_cancelling_an_unknown_event_is_a_tool_error(calendar: Client) -> None:
    result = await calendar.call_tool("cancel", {"event_id": "evt-9999"})
    assert "No event with id 'evt-9999'" in error_text(result)


# --- Idempotency ---


async def test_create_with_a_repeated_key_creates_once(calendar: Client) -> None:
    title, key = unique("Offsite"), new_key()
    first = await calendar.call_tool("create", event_arguments(title), meta=key_meta(key))
    second = await calendar.call_tool("create", event_arguments(title), meta=key_meta(key))
    assert ok(second) == ok(first)
    assert second.content == first.content
    assert await titled(calendar, title) == [ok(first)]


async def test_cancel_with_a_repeated_key_returns_the_first_result(calendar: Client) -> None:
    event, key = ok(await calendar.call_tool("create", event_arguments(unique("Cancel twice")))), new_key()
    first = ok(await calendar.call_tool("cancel", {"event_id": event["id"]}, meta=key_meta(key)))
    second = ok(await calendar.call_tool("cancel", {"event_id": event["id"]}, meta=key_meta(key)))
    assert first["already_cancelled"] is False
    assert second == first


async def test_a_key_reused_with_different_arguments_is_a_tool_error(calendar: Client) -> None:
    title, key = unique("Reused key"), new_key()
    ok(await calendar.call_tool("create", event_arguments(title), meta=key_meta(key)))
    moved = event_arguments(title, start="2027-03-01T12:00:00+01:00", end="2027-03-01T13:00:00+01:00")
    result = await calendar.call_tool("create", moved, meta=key_meta(key))
    assert "different arguments" in error_text(result)
    assert len(await titled(calendar, title)) == 1


async def test_a_key_reused_for_a_different_tool_is_a_tool_error(calendar: Client) -> None:
    key = new_key()
    event = ok(await calendar.call_tool("create", event_arguments(unique("Key for create")), meta=key_meta(key)))
    result = await calendar.call_tool("cancel", {"event_id": event["id"]}, meta=key_meta(key))
    assert "already used for the tool 'create'" in error_text(result)
    assert (await titled(calendar, event["title"]))[0]["status"] == "confirmed"


async def test_concurrent_creates_with_one_key_create_once(calendar: Client) -> None:
    title, key = unique("Concurrent"), new_key()
    results: list[dict[str, Any]] = []

    async def call() -> None:
        results.append(ok(await calendar.call_tool("create", event_arguments(title), meta=key_meta(key))))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(call)
    assert len(results) == 8 and all(result == results[0] for result in results)
    assert len(await titled(calendar, title)) == 1
