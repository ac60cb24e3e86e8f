"""The mailbox server over stdio, in both protocol eras (one server process per era for the module).

Tests that change state work on messages they send themselves, so they share the server safely.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client

from .conftest import (
    MODES,
    READ,
    annotations_of,
    error_text,
    key_meta,
    new_key,
    ok,
    stdio_client,
    unique,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=MODES)
async def mailbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    async with stdio_client("mailbox", tmp_path_factory.mktemp("mailbox"), request.param) as client:
        yield client


async def send(client: Client, subject: str, *, to: str = "lee@example.com", **kwargs: Any) -> dict[str, Any]:
    return ok(await client.call_tool("send", {"to": to, "subject": subject, "body": "Hello."}, **kwargs))


async def count_sent(client: Client, subject: str) -> int:
    found = ok(await client.call_tool("search", {"query": subject, "folder": "sent"}))
    return found["total"]


# --- Listing: names, titles, annotations, schemas ---


async def test_the_tools_are_search_read_archive_send_and_delete(mailbox: Client) -> None:
    tools = (await mailbox.list_tools()).tools
    assert sorted(tool.name for tool in tools) == ["archive", "delete", "read", "search", "send"]


async def test_every_tool_has_a_title_a_description_and_an_output_schema(mailbox: Client) -> None:
    titles = {tool.name: tool.title for tool in (await mailbox.list_tools()).tools}
    assert titles == {
        "search": "Search messages",
        "read": "Read message",
        "archive": "Archive message",
        "send": "Send message",
        "delete": "Delete message",
    }
    for tool in (await mailbox.list_tools()).tools:
        assert tool.description and len(tool.description) > 30, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name


async def test_search_and_read_are_annotated_as_closed_world_idempotent_reads(mailbox: Client) -> None:
    tools = {tool.name: tool for tool in (await mailbox.list_tools()).tools}
    assert annotations_of(tools["search"].annotations) == READ
    assert annotations_of(tools["read"].annotations) == READ


async def test_archive_is_annotated_as_a_non_destructive_write(mailbox: Client) -> None:
    tools = {tool.name: tool for tool in (await mailbox.list_tools()).tools}
    annotations = annotations_of(tools["archive"].annotations)
    assert annotations["read_only"] is False
    assert annotations["destructive"] is False


async def test_send_and_delete_are_annotated_as_destructive_writes(mailbox: Client) -> None:
    tools = {tool.name: tool for tool in (await mailbox.list_tools()).tools}
    for name in ("send", "delete"):
        annotations = annotations_of(tools[name].annotations)
        assert annotations["read_only"] is False, name
        assert annotations["destructive"] is True, name
    assert annotations_of(tools["send"].annotations)["idempotent"] is False


async def test_send_declares_an_optional_idempotency_key_argument(mailbox: Client) -> None:
    send_tool = next(tool for tool in (await mailbox.list_tools()).tools if tool.name == "send")
    assert "idempotency_key" in send_tool.input_schema["properties"]
    assert "idempotency_key" not in send_tool.input_schema.get("required", [])
    assert sorted(send_tool.input_schema["required"]) == ["body", "subject", "to"]


# --- Reads ---


async def test_a_new_mailbox_is_seeded_with_sample_messages_with_deterministic_ids(mailbox: Client) -> None:
    first = ok(await mailbox.call_tool("read", {"message_id": "msg-0001"}))
    assert first["subject"] == "Q3 budget review moved to Thursday"
    assert first["folder"] == "inbox"
    inbox = ok(await mailbox.call_tool("search", {"folder": "inbox", "limit": 50}))
    assert {"msg-0001", "msg-0002", "msg-0003"} <= {message["id"] for message in inbox["messages"]}


async def test_search_matches_subject_body_and_sender_within_a_folder(mailbox: Client) -> None:
    found = ok(await mailbox.call_tool("search", {"query": "SHIPMENT 88213", "folder": "inbox"}))
    assert [message["id"] for message in found["messages"]] == ["msg-0003"]
    assert found["messages"][0]["snippet"].startswith("Hello, Shipment 88213")
    by_sender = ok(await mailbox.call_tool("search", {"query": "billing@cloudhost"}))
    assert [message["id"] for message in by_sender["messages"]] == ["msg-0002"]
    limited = ok(await mailbox.call_tool("search", {"query": "", "limit": 2}))
    assert len(limited["messages"]) == 2
    assert limited["total"] > 2


async def test_search_in_an_unknown_folder_is_a_tool_error(mailbox: Client) -> None:
    result = await mailbox.call_tool("search", {"query": "x", "folder": "spam"})
    assert "folder" in error_text(result)


async def test_read_returns_the_whole_message(mailbox: Client) -> None:
    message = ok(await mailbox.call_tool("read", {"message_id": "msg-0003"}))
    assert message["sender"] == "marco.rossi@acme-logistics.example"
    assert message["recipients"] == ["you@patchbay.example", "dana.okafor@northwind.example"]
    assert "corrected commercial invoice" in message["body"]


async def test_reading_an_unknown_message_is_a_tool_error_naming_the_id(mailbox: Client) -> None:
    result = await mailbox.call_tool("read", {"message_id": "msg-9999"})
    assert "No message with id 'msg-9999'" in error_text(result)


async def test_an_unknown_tool_comes_back_as_an_is_error_result_not_a_protocol_error(mailbox: Client) -> None:
    assert "Unknown tool" in error_text(await mailbox.call_tool("no_such_tool", {}))


# --- Writes ---


async def test_send_stores_the_message_in_the_sent_folder(mailbox: Client) -> None:
    subject = unique("Quarterly numbers")
    sent = await send(mailbox, subject, to="lee@example.com, kim@example.org")
    assert sent["folder"] == "sent"
    assert sent["recipients"] == ["lee@example.com", "kim@example.org"]
    assert sent["id"].startswith("msg-")
    assert ok(await mailbox.call_tool("read", {"message_id": sent["id"]})) == sent


async def test_send_to_an_invalid_address_is_a_tool_error_and_sends_nothing(mailbox: Client) -> None:
    subject = unique("Bad address")
    result = await mailbox.call_tool("send", {"to": "not-an-address", "subject": subject, "body": "x"})
    assert "Not a valid email address" in error_text(result)
    assert await count_sent(mailbox, subject) == 0


async def test_archive_moves_a_message_to_the_archive_folder(mailbox: Client) -> None:
    sent = await send(mailbox, unique("To archive"))
    archived = ok(await mailbox.call_tool("archive", {"message_id": sent["id"]}))
    assert archived == {"id": sent["id"], "previous_folder": "sent", "folder": "archive", "already_archived": False}
    assert ok(await mailbox.call_tool("read", {"message_id": sent["id"]}))["folder"] == "archive"
    again = ok(await mailbox.call_tool("archive", {"message_id": sent["id"]}))
    assert again["already_archived"] is True


async def test_archiving_an_unknown_message_is_a_tool_error(mailbox: Client) -> None:
    result = await mailbox.call_tool("archive", {"message_id": "msg-nope"})
    assert "No message with id 'msg-nope'" in error_text(result)


async def test_delete_removes_the_message(mailbox: Client) -> None:
    subject = unique("To delete")
    sent = await send(mailbox, subject)
    deleted = ok(await mailbox.call_tool("delete", {"message_id": sent["id"]}))
    assert deleted == {"id": sent["id"], "deleted": True, "subject": subject}
    assert error_text(await mailbox.call_tool("read", {"message_id": sent["id"]}))
    assert await count_sent(mailbox, subject) == 0


async def test_deleting_an_unknown_message_is_a_tool_error(mailbox: Client) -> None:
    result = await mailbox.call_tool("delete", {"message_id": "msg-0000"})
    assert "No message with id 'msg-0000'" in error_text(result)


# --- Idempotency ---


async def test_send_without_a_key_sends_every_time(mailbox: Client) -> None:
    subject = unique("No key")
    first, second = await send(mailbox, subject), await send(mailbox, subject)
    assert first["id"] != second["id"]
    assert await count_sent(mailbox, subject) == 2


async def test_send_with_a_repeated_key_sends_once(mailbox: Client) -> None:
    subject, key = unique("Keyed"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Once."}
    first = await mailbox.call_tool("send", arguments, meta=key_meta(key))
    second = await mailbox.call_tool("send", arguments, meta=key_meta(key))
    assert ok(second) == ok(first)
    assert second.content == first.content
    assert await count_sent(mailbox, subject) == 1


async def test_send_with_a_repeated_idempotency_key_argument_sends_once(mailbox: Client) -> None:
    subject, key = unique("Keyed by argument"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Once.", "idempotency_key": key}
    first = ok(await mailbox.call_tool("send", arguments))
    second = ok(await mailbox.call_tool("send", arguments))
    assert second == first
    assert await count_sent(mailbox, subject) == 1


async def test_a_key_sent_as_argument_and_then_in_meta_is_the_same_key(mailbox: Client) -> None:
    subject, key = unique("Either place"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Once."}
    first = ok(await mailbox.call_tool("send", {**arguments, "idempotency_key": key}))
    second = ok(await mailbox.call_tool("send", arguments, meta=key_meta(key)))
    both = ok(await mailbox.call_tool("send", {**arguments, "idempotency_key": key}, meta=key_meta(key)))
    assert first == second == both
    assert await count_sent(mailbox, subject) == 1


async def test_send_with_different_keys_in_argument_and_meta_is_a_tool_error(mailbox: Client) -> None:
    subject = unique("Two keys")
    arguments = {"to": "lee@example.com", "subject": subject, "body": "x", "idempotency_key": new_key()}
    result = await mailbox.call_tool("send", arguments, meta=key_meta(new_key()))
    assert "differs from the key in _meta" in error_text(result)
    assert await count_sent(mailbox, subject) == 0


async def test_a_key_reused_with_different_arguments_is_a_tool_error(mailbox: Client) -> None:
    subject, key = unique("Reused key"), new_key()
    await send(mailbox, subject, meta=key_meta(key))
    result = await mailbox.call_tool(
        "send", {"to": "lee@example.com", "subject": subject, "body": "Different body."}, meta=key_meta(key)
    )
    assert "different arguments" in error_text(result)
    assert await count_sent(mailbox, subject) == 1


async def test_a_key_reused_for_a_different_tool_is_a_tool_error(mailbox: Client) -> None:
    key = new_key()
    sent = await send(mailbox, unique("Key for send"), meta=key_meta(key))
    result = await mailbox.call_tool("delete", {"message_id": sent["id"]}, meta=key_meta(key))
    assert "already used for the tool 'send'" in error_text(result)
    assert ok(await mailbox.call_tool("read", {"message_id": sent["id"]}))["id"] == sent["id"]


async def test_archive_with_a_repeated_key_returns_the_first_result(mailbox: Client) -> None:
    sent, key = await send(mailbox, unique("Archive twice")), new_key()
    first = ok(await mailbox.call_tool("archive", {"message_id": sent["id"]}, meta=key_meta(key)))
    second = ok(await mailbox.call_tool("archive", {"message_id": sent["id"]}, meta=key_meta(key)))
    assert first["already_archived"] is False
    assert second == first  # the replay, not a fresh "already archived" answer


async def test_delete_with_a_repeated_key_replays_the_result_instead_of_failing(mailbox: Client) -> None:
    sent, key = await send(mailbox, unique("Delete twice")), new_key()
    first = ok(await mailbox.call_tool("delete", {"message_id": sent["id"]}, meta=key_meta(key)))
    second = ok(await mailbox.call_tool("delete", {"message_id": sent["id"]}, meta=key_meta(key)))
    assert second == first == {"id": sent["id"], "deleted": True, "subject": sent["subject"]}


async def test_a_failed_call_records_no_key(mailbox: Client) -> None:
    key = new_key()
    failed = await mailbox.call_tool("delete", {"message_id": "msg-0000"}, meta=key_meta(key))
    assert error_text(failed)
    subject = unique("After a failure")
    sent = await send(mailbox, subject, meta=key_meta(key))
    assert sent["subject"] == subject


async def test_a_key_that_is_not_a_string_is_a_tool_error(mailbox: Client) -> None:
    subject = unique("Numeric key")
    result = await mailbox.call_tool(
        "send", {"to": "lee@example.com", "subject": subject, "body": "x"}, meta={"dev.patchbay/idempotencyKey": 42}
    )
    assert "must be a non-empty string" in error_text(result)
    assert await count_sent(mailbox, subject) == 0


async def test_concurrent_sends_with_one_key_send_once(mailbox: Client) -> None:
    subject, key = unique("Concurrent"), new_key()
    arguments = {"to": "lee@example.com", "subject": subject, "body": "Once, despite the race."}
    results: list[dict[str, Any]] = []

    async def call() -> None:
        results.append(ok(await mailbox.call_tool("send", arguments, meta=key_meta(key))))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(call)
    assert len(results) == 8
    assert all(result == results[0] for result in results)
    assert await count_sent(mailbox, subject) == 1
