"""Names agents are given, through /mcp with the SDK client in both eras: an admin's rename
calls the original; a one-server view without the prefix lists and calls the server's own
names under every rule of the host; and a change is heard only by the agent whose list it
changed. The host is the package's `main` one: each rename made here is undone on the way
out, so the other modules see the bundled names."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import mcp
import mcp_types as types
import pytest

from tests.gateway.agents import MODES, agent, text, tool_names
from tests.gateway.conftest import STATUS_TOOL, GatewayHost

TASKS_OWN = {"add", "complete", "delete", "list", STATUS_TOOL}


def _token(host: GatewayHost, name: str, *options: str) -> None:
    if name not in host.tokens:
        host.tokens[name] = json.loads(host.mcp("token", "create", name, "--json", *options).stdout)["token"]


@contextlib.contextmanager
def renamed(host: GatewayHost, tool: str, *args: str) -> Iterator[None]:
    host.mcp("rename", tool, *args)
    try:
        yield
    finally:
        host.mcp("rename", tool, "--reset")


@pytest.fixture(scope="module")
def names_host(main_host: GatewayHost) -> GatewayHost:
    _token(main_host, "names-mail", "--servers", "mailbox")
    _token(main_host, "names-own-tasks", "--servers", "tasks", "--no-prefix")
    return main_host


async def _until(check: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found or time.monotonic() > deadline:
            assert found, f"timed out waiting for {what}"
            return found
        await asyncio.sleep(0.3)


@pytest.mark.parametrize("mode", MODES)
def test_a_rename_appears_and_calls_the_original(names_host: GatewayHost, mode: str) -> None:
    async def scenario() -> tuple[set[str], types.Tool, types.CallToolResult, types.CallToolResult]:
        async with agent(names_host, "names-mail", mode) as client:
            names = await _until(lambda: _names_with(client, "find_mail"), "the rename")
            tool = next(t for t in (await client.list_tools()).tools if t.name == "find_mail")
            found = await client.call_tool("find_mail", {"query": "", "limit": 1})
            old = await client.call_tool("mailbox__search", {"query": ""})
            return names, tool, found, old

    with renamed(names_host, "mailbox__search", "find_mail", "--description", "Find messages (for agents)."):
        names, tool, found, old = asyncio.run(scenario())
        rows = names_host.calls("--limit", "20")
    assert "find_mail" in names and "mailbox__search" not in names
    assert tool.description == "Find messages (for agents)." and tool.input_schema["properties"]["query"]
    assert not found.is_error and found.structured_content and found.structured_content["total"] >= 1, text(found)
    assert old.is_error and text(old) == "Unknown tool: mailbox__search"  # the old name is gone for agents
    # On record under the catalog's name: the ledger, the rules and the outbox know that one.
    mine = [r for r in rows if r["requester"] == "names-mail"]
    assert mine and mine[0]["tool"] == "mailbox__search" and mine[0]["status"] == "succeeded", mine


async def _names_with(client: mcp.Client, name: str) -> set[str] | None:
    names = await tool_names(client)
    return names if name in names else None


@pytest.mark.parametrize("mode", MODES)
def test_a_view_without_the_prefix_lists_and_calls_the_servers_own_names(names_host: GatewayHost, mode: str) -> None:
    title = f"own names ({mode})"

    async def scenario() -> tuple[set[str], types.CallToolResult, types.CallToolResult, types.CallToolResult]:
        async with agent(names_host, "names-own-tasks", mode) as client:
            names = await tool_names(client)
            listing = await client.call_tool("list", {})
            added = await client.call_tool("add", {"title": title})  # a write: through the outbox
            prefixed = await client.call_tool("tasks__list", {})
            return names, listing, added, prefixed

    names, listing, added, prefixed = asyncio.run(scenario())
    assert names == TASKS_OWN
    assert not listing.is_error and "tasks" in (listing.structured_content or {}), text(listing)
    assert not added.is_error and (added.structured_content or {}).get("title") == title, text(added)
    assert prefixed.is_error and text(prefixed) == "Unknown tool: tasks__list"
    rows = [r for r in names_host.calls("--limit", "50") if r["requester"] == "names-own-tasks"]
    by_tool = {r["tool"]: r for r in rows}
    assert by_tool["tasks__list"]["decision"] == "run"
    # The write went through the outbox, with its idempotency key, as any agent's.
    assert by_tool["tasks__add"]["decision"] == "outbox" and by_tool["tasks__add"]["status"] == "succeeded"
    shown = json.loads(names_host.mcp("token", "show", "names-own-tasks", "--json").stdout)
    assert {t["name"] for t in shown["listed"]} == TASKS_OWN - {STATUS_TOOL} and shown["no_prefix"] is True


@pytest.mark.parametrize("mode", MODES)
def test_a_destructive_call_by_its_own_name_still_waits_for_a_person(names_host: GatewayHost, mode: str) -> None:
    async def scenario() -> types.CallToolResult:
        async with agent(names_host, "names-own-tasks", mode) as client:
            return await client.call_tool("delete", {"task_id": "task-0001"})

    result = asyncio.run(scenario())  # the main host waits 4 s for an approval, then answers
    assert "is waiting for a person's approval" in text(result), text(result)
    waiting = json.loads(names_host.mcp("calls", "--json", "--status", "waiting", "--limit", "50").stdout)
    mine = [r for r in waiting if r["requester"] == "names-own-tasks" and r["tool"] == "tasks__delete"]
    assert mine, waiting
    names_host.mcp("deny", str(mine[0]["call_id"]), "--reason", "a test of the rules")


@contextlib.asynccontextmanager
async def _hearing(host: GatewayHost, token: str, mode: str, heard: list[float]) -> AsyncIterator[mcp.Client]:
    """An agent that notes each tools list_changed it hears: on its 2025-era session, or on
    its 2026-07-28 listen stream."""

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append(time.monotonic())

    kw = {"message_handler": on_message} if mode == "legacy" else {}
    async with agent(host, token, mode, **kw) as client:
        await tool_names(client)  # a 2025-era session is known to the endpoint from its first request
        if mode == "legacy":
            yield client
            return
        async with client.listen(tools_list_changed=True) as subscription:

            async def pump() -> None:
                async for _event in subscription:
                    heard.append(time.monotonic())

            pumping = asyncio.ensure_future(pump())
            try:
                await asyncio.sleep(0.5)  # the stream's acknowledgement
                yield client
            finally:
                pumping.cancel()
                with contextlib.suppress(BaseException):
                    await pumping


@pytest.mark.parametrize("mode", MODES)
def test_a_change_is_heard_only_by_the_agent_whose_view_it_changed(names_host: GatewayHost, mode: str) -> None:
    mail, calendar = f"hear-mail-{mode}", f"hear-calendar-{mode}"
    _token(names_host, mail, "--servers", "mailbox")
    _token(names_host, calendar, "--servers", "calendar")
    heard: dict[str, list[float]] = {mail: [], calendar: []}

    async def until_heard(who: str, since: int) -> None:
        async def check() -> bool:
            return len(heard[who]) > since

        await _until(check, f"{who} to hear of its change", timeout=30)

    async def scenario() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = {mail: [], calendar: []}
        async with _hearing(names_host, mail, mode, heard[mail]), _hearing(names_host, calendar, mode, heard[calendar]):
            # 1. An edit of one view: only that agent hears.
            before = {k: len(v) for k, v in heard.items()}
            await asyncio.to_thread(names_host.mcp, "token", "update", mail, "--exclude", "*__delete")
            await until_heard(mail, before[mail])
            await asyncio.sleep(1.5)  # time enough for a notice sent to the other one to land
            counts[mail].append(len(heard[mail]) - before[mail])
            counts[calendar].append(len(heard[calendar]) - before[calendar])
            # 2. A catalog change inside the other view (a rename): only that agent hears.
            before = {k: len(v) for k, v in heard.items()}
            await asyncio.to_thread(names_host.mcp, "rename", "calendar__list", "list_events")
            try:
                await until_heard(calendar, before[calendar])
                await asyncio.sleep(1.5)
            finally:
                await asyncio.to_thread(names_host.mcp, "rename", "calendar__list", "--reset")
            counts[mail].append(len(heard[mail]) - before[mail])
            counts[calendar].append(len(heard[calendar]) - before[calendar])
        return counts

    counts = asyncio.run(scenario())
    assert [n > 0 for n in counts[mail]] == [True, False], counts
    assert [n > 0 for n in counts[calendar]] == [False, True], counts
