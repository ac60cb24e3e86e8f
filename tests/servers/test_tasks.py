"""The tasks server over stdio, in both protocol eras (one server process per era for the module).

Tests that change state work on tasks they add themselves, so they share the server safely.
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
async def tasks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    async with stdio_client("tasks", tmp_path_factory.mktemp("tasks"), request.param) as client:
        yield client


async def add(client: Client, title: str, **kwargs: Any) -> dict[str, Any]:
    return ok(await client.call_tool("add", {"title": title}, **kwargs))


async def titled(client: Client, title: str) -> list[dict[str, Any]]:
    listing = ok(await client.call_tool("list", {}))
    return [task for task in listing["tasks"] if task["title"] == title]


# --- Listing: names, titles, annotations, schemas ---


async def test_the_tools_are_list_add_complete_and_delete(tasks: Client) -> None:
    tools = (await tasks.list_tools()).tools
    assert sorted(tool.name for tool in tools) == ["add", "complete", "delete", "list"]


async def test_every_tool_has_a_title_a_description_and_an_output_schema(tasks: Client) -> None:
    tools = (await tasks.list_tools()).tools
    assert {tool.name: tool.title for tool in tools} == {
        "list": "List tasks",
        "add": "Add task",
        "complete": "Complete task",
        "delete": "Delete task",
    }
    for tool in tools:
        assert tool.description and len(tool.description) > 30, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name


async def test_list_is_annotated_as_a_closed_world_idempotent_read(tasks: Client) -> None:
    tools = {tool.name: tool for tool in (await tasks.list_tools()).tools}
    assert annotations_of(tools["list"].annotations) == READ


async def test_add_and_complete_are_annotated_as_non_destructive_writes(tasks: Client) -> None:
    tools = {tool.name: tool for tool in (await tasks.list_tools()).tools}
    for name in ("add", "complete"):
        annotations = annotations_of(tools[name].annotations)
        assert annotations["read_only"] is False, name
        assert annotations["destructive"] is False, name


async def test_delete_is_annotated_as_a_destructive_write(tasks: Client) -> None:
    tools = {tool.name: tool for tool in (await tasks.list_tools()).tools}
    annotations = annotations_of(tools["delete"].annotations)
    assert annotations["read_only"] is False
    assert annotations["destructive"] is True


# --- list ---


async def test_a_new_task_list_is_seeded_with_sample_tasks(tasks: Client) -> None:
    listing = ok(await tasks.call_tool("list", {}))
    by_id = {task["id"]: task for task in listing["tasks"]}
    assert by_id["task-0001"]["title"] == "Send revised commercial invoice for shipment 88213"
    assert by_id["task-0001"]["due"] == "2026-05-06"
    assert by_id["task-0005"]["status"] == "done"


async def test_list_filters_by_status(tasks: Client) -> None:
    done = ok(await tasks.call_tool("list", {"status": "done"}))
    assert done["status"] == "done"
    assert done["tasks"] and all(task["status"] == "done" for task in done["tasks"])
    assert "task-0005" in {task["id"] for task in done["tasks"]}
    still_open = ok(await tasks.call_tool("list", {"status": "open"}))
    assert still_open["tasks"] and all(task["status"] == "open" for task in still_open["tasks"])
    assert still_open["total"] == len(still_open["tasks"])


async def test_listing_an_unknown_status_is_a_tool_error(tasks: Client) -> None:
    result = await tasks.call_tool("list", {"status": "someday"})
    assert "status" in error_text(result)


# --- add, complete, delete ---


async def test_add_creates_an_open_task_with_a_due_date_and_notes(tasks: Client) -> None:
    title = unique("Renew passport")
    task = ok(await tasks.call_tool("add", {"title": title, "due": "2026-06-30", "notes": "Photos first."}))
    assert task["id"].startswith("task-")
    assert (task["title"], task["due"], task["notes"], task["status"]) == (title, "2026-06-30", "Photos first.", "open")
    assert task["completed_at"] is None
    assert await titled(tasks, title) == [task]


async def test_adding_a_task_with_an_invalid_due_date_is_a_tool_error(tasks: Client) -> None:
    title = unique("Bad date")
    result = await tasks.call_tool("add", {"title": title, "due": "2026-02-30"})
    assert "Invalid due date '2026-02-30'" in error_text(result)
    assert await titled(tasks, title) == []


async def test_complete_marks_the_task_done(tasks: Client) -> None:
    task = await add(tasks, unique("Water the plants"))
    completed = ok(await tasks.call_tool("complete", {"task_id": task["id"]}))
    assert completed["already_done"] is False
    assert completed["task"]["status"] == "done"
    assert completed["task"]["completed_at"]
    again = ok(await tasks.call_tool("complete", {"task_id": task["id"]}))
    assert again == {"task": completed["task"], "already_done": True}


async def test_completing_an_unknown_task_is_a_tool_error(tasks: Client) -> None:
    result = await tasks.call_tool("complete", {"task_id": "task-9999"})
    assert "No task with id 'task-9999'" in error_text(result)


async def test_delete_removes_the_task(tasks: Client) -> None:
    title = unique("Short-lived")
    task = await add(tasks, title)
    deleted = ok(await tasks.call_tool("delete", {"task_id": task["id"]}))
    assert deleted == {"id": task["id"], "deleted": True, "title": title}
    assert await titled(tasks, title) == []


async def test_deleting_an_unknown_task_is_a_tool_error(tasks: Client) -> None:
    result = await tasks.call_tool("delete", {"task_id": "task-0000"})
    assert "No task with id 'task-0000'" in error_text(result)


# --- Idempotency ---


async def test_add_without_a_key_adds_every_time(tasks: Client) -> None:
    title = unique("Twice")
    await add(tasks, title)
    await add(tasks, title)
    assert len(await titled(tasks, title)) == 2


async def test_add_with_a_repeated_key_adds_once(tasks: Client) -> None:
    title, key = unique("Once"), new_key()
    first = await tasks.call_tool("add", {"title": title, "due": "2026-07-01"}, meta=key_meta(key))
    second = await tasks.call_tool("add", {"title": title, "due": "2026-07-01"}, meta=key_meta(key))
    assert ok(second) == ok(first)
    assert second.content == first.content
    assert await titled(tasks, title) == [ok(first)]


async def test_complete_with_a_repeated_key_returns_the_first_result(tasks: Client) -> None:
    task, key = await add(tasks, unique("Complete twice")), new_key()
    first = ok(await tasks.call_tool("complete", {"task_id": task["id"]}, meta=key_meta(key)))
    second = ok(await tasks.call_tool("complete", {"task_id": task["id"]}, meta=key_meta(key)))
    assert first["already_done"] is False
    assert second == first


async def test_delete_with_a_repeated_key_replays_the_result_instead_of_failing(tasks: Client) -> None:
    task, key = await add(tasks, unique("Delete twice")), new_key()
    first = ok(await tasks.call_tool("delete", {"task_id": task["id"]}, meta=key_meta(key)))
    second = ok(await tasks.call_tool("delete", {"task_id": task["id"]}, meta=key_meta(key)))
    assert second == first


async def test_a_key_reused_with_different_arguments_is_a_tool_error(tasks: Client) -> None:
    title, key = unique("Reused key"), new_key()
    await add(tasks, title, meta=key_meta(key))
    result = await tasks.call_tool("add", {"title": title, "notes": "changed"}, meta=key_meta(key))
    assert "different arguments" in error_text(result)
    assert len(await titled(tasks, title)) == 1


async def test_a_key_reused_for_a_different_tool_is_a_tool_error(tasks: Client) -> None:
    key = new_key()
    task = await add(tasks, unique("Key for add"), meta=key_meta(key))
    result = await tasks.call_tool("complete", {"task_id": task["id"]}, meta=key_meta(key))
    assert "already used for the tool 'add'" in error_text(result)
    assert (await titled(tasks, task["title"]))[0]["status"] == "open"


async def test_concurrent_adds_with_one_key_add_once(tasks: Client) -> None:
    title, key = unique("Concurrent"), new_key()
    results: list[dict[str, Any]] = []

    async def call() -> None:
        results.append(await add(tasks, title, meta=key_meta(key)))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(call)
    assert len(results) == 8 and all(result == results[0] for result in results)
    assert len(await titled(tasks, title)) == 1
