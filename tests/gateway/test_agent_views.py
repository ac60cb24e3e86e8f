"""Each agent its own view of the catalog (servers, tool patterns, the highest class), with
the SDK client in both eras against a real host; the view itself as a unit."""

from __future__ import annotations

import asyncio
import json

import mcp_types as types
import pytest

from hostapp.gateway.agent_catalog import costs
from hostapp.gateway.agent_view import AgentView, ViewError, max_class, patterns
from tests.gateway.agents import MODES, agent, text, tool_names
from tests.gateway.conftest import BUNDLED_TOOLS, STATUS_TOOL, GatewayHost

READ_ONLY_TOOLS = {"calendar__list", "mailbox__read", "mailbox__search", "tasks__list"}


# -- the view, alone ----------------------------------------------------------------------------


def test_a_view_by_server_pattern_exclusion_and_class() -> None:
    view = AgentView(("mailbox", "tasks"), ("mailbox__*", "list"), ("*delete",), "write")
    assert view.sees("mailbox", "mailbox__archive", "archive", "write")
    assert view.sees("tasks", "tasks__list", "list", "read_only")  # by its original name
    assert not view.sees("tasks", "tasks__add", "add", "write")  # no pattern names it
    assert not view.sees("mailbox", "mailbox__delete", "delete", "write")  # excluded wins
    assert not view.sees("mailbox", "mailbox__send", "send", "destructive")  # above its class
    assert not view.sees("calendar", "calendar__list", "list", "read_only")  # not its server
    assert not view.sees("mailbox", "mailbox__odd", "odd", "unheard-of")  # an unknown class is the highest
    everything = AgentView()
    assert everything.sees("any", "any__thing", "thing", "destructive") and not everything.narrowed


def test_what_a_person_gives_is_checked() -> None:
    assert patterns([" mailbox__* ", "", "mailbox__*", "tasks__list"], "tools") == ("mailbox__*", "tasks__list")
    assert max_class("read-only") == "read_only" and max_class("all") == "" and max_class(None) == ""
    with pytest.raises(ViewError, match="max class"):
        max_class("harmless")
    with pytest.raises(ViewError, match="tools"):
        patterns(["two words"], "tools")
    with pytest.raises(ViewError, match="at most"):
        patterns([f"t{i}" for i in range(101)], "tools")


# -- through /mcp --------------------------------------------------------------------------------


def _token(host: GatewayHost, name: str, *options: str) -> dict:
    if name not in host.tokens:
        created = json.loads(host.mcp("token", "create", name, "--json", *options).stdout)
        host.tokens[name] = created["token"]
    return json.loads(host.mcp("token", "show", name, "--json").stdout)


@pytest.fixture(scope="module")
def views(main_host: GatewayHost) -> GatewayHost:
    _token(main_host, "view-reader", "--max-class", "read_only")
    _token(main_host, "view-mail", "--tools", "mailbox__*", "--exclude", "*__delete,*__send")
    return main_host


@pytest.mark.parametrize("mode", MODES)
def test_two_tokens_with_different_views_list_different_tools(views: GatewayHost, mode: str) -> None:
    async def scenario() -> tuple[set[str], set[str]]:
        async with agent(views, "view-reader", mode) as reader, agent(views, "view-mail", mode) as mail:
            return await tool_names(reader), await tool_names(mail)

    reader, mail = asyncio.run(scenario())
    assert reader == READ_ONLY_TOOLS | {STATUS_TOOL}
    assert mail == {"mailbox__archive", "mailbox__read", "mailbox__search", STATUS_TOOL}
    # `mcp token show` lists exactly what the agent is given.
    shown = json.loads(views.mcp("token", "show", "view-mail", "--json").stdout)
    assert {t["name"] for t in shown["listed"]} == mail - {STATUS_TOOL}
    assert (shown["tools"], shown["exclude"], shown["max_class"]) == (["mailbox__*"], ["*__delete", "*__send"], None)


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_outside_the_view_is_unknown_to_the_agent_and_refused_on_record(views: GatewayHost, mode: str) -> None:
    title = f"outside the view ({mode})"

    async def scenario() -> str:
        async with agent(views, "view-reader", mode) as client:
            result = await client.call_tool("tasks__add", {"title": title})
            assert result.is_error
            return text(result)

    assert asyncio.run(scenario()) == "Unknown tool: tasks__add"
    rows = [r for r in views.calls("--limit", "50") if r["requester"] == "view-reader" and r["tool"] == "tasks__add"]
    assert rows and rows[0]["status"] == "blocked" and rows[0]["decision"] == "refuse", rows
    assert "outside the view of the agent view-reader" in (rows[0]["error"] or "")
    tasks = json.loads(views.mcp("calls", "--json", "--status", "succeeded", "--limit", "200").stdout)
    assert not [r for r in tasks if r["tool"] == "tasks__add" and r["requester"] == "view-reader"]


def test_an_updated_view_is_what_the_agent_lists_next(views: GatewayHost) -> None:
    _token(views, "view-changing", "--servers", "calendar")

    async def names() -> set[str]:
        async with agent(views, "view-changing", "auto") as client:
            return await tool_names(client)

    assert asyncio.run(names()) == {n for n in BUNDLED_TOOLS if n.startswith("calendar__")} | {STATUS_TOOL}
    out = views.mcp("token", "update", "view-changing", "--servers", "", "--tools", "*__list").stdout
    assert "view-changing now sees every server; tools *__list" in out
    assert asyncio.run(names()) == {"calendar__list", "tasks__list", STATUS_TOOL}
    refused = views.mcp("token", "update", "view-changing", "--max-class", "harmless", check=False)
    assert refused.returncode != 0 and "not one of read_only, write, destructive" in refused.stderr


def test_the_size_of_a_view_is_that_of_the_definitions_as_sent() -> None:
    small = types.Tool(name="t", input_schema={"type": "object"})
    described = types.Tool(name="déjà", description="x" * 100, input_schema={"type": "object"})
    found = costs([small, described])
    wire_small = '{"name":"t","inputSchema":{"type":"object"}}'
    wire_described = '{"name":"déjà","description":"' + "x" * 100 + '","inputSchema":{"type":"object"}}'
    assert [(c.name, c.bytes) for c in found] == [
        ("t", len(wire_small)),
        ("déjà", len(wire_described.encode())),  # bytes, not characters
    ]
    assert found[0].bytes == 44 and found[0].tokens == 11  # 44 / 4
    assert found[1].tokens == -(-found[1].bytes // 4)
