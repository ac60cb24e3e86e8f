"""Prompts, resources, templates and completions through the agents' endpoint (/mcp).

server-everything (npm, as users run it) sits behind a real host twice: `everything` over
stdio and `web` over Streamable HTTP, both trusted (their prompts are accepted as listed).
The SDK client talks to /mcp in both eras with three tokens:

* `all`: every server, prefixed: prompts `<server>__<prompt>`, URIs `patchbay://<server>/<uri>`;
* `own`: `--servers web --no-prefix`: the server's own names and URIs, the same as a client
  connected to server-everything directly sees them (in name order: the host keeps lists
  sorted);
* `simple`: `--servers everything --tools 'everything__simple-*'`: one prompt, no other.

Every read is on record (the host's `calls_read` rows, read from its SQLite file).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import mcp
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client

from tests.gateway.agents import MODES, agent
from tests.gateway.conftest import GatewayHost, _rows

pytestmark = pytest.mark.slow

PROMPTS = ["args-prompt", "completable-prompt", "resource-prompt", "simple-prompt"]
DOCUMENT = "demo://resource/static/document/architecture.md"
TEMPLATE = "demo://resource/dynamic/text/{resourceId}"


def _reads(host: GatewayHost, requester: str) -> list[tuple[str, str, str, str]]:
    return [
        tuple(r)  # type: ignore[misc]
        for r in _rows(
            host,
            "SELECT server_name, kind, target, outcome FROM calls_read "
            f"WHERE requester_name = '{requester}' ORDER BY id",
        )
    ]


@contextlib.asynccontextmanager
async def direct(url: str) -> Any:
    async with mcp.Client(streamable_http_client(url), mode="legacy") as client:
        yield client


def _dump(items: list[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(mode="json", exclude_none=True) for i in items]


@pytest.mark.parametrize("mode", MODES)
def test_a_prefixed_view_lists_every_servers_prompts_and_resources_by_their_server(
    offers_host: GatewayHost, mode: str
) -> None:
    async def scenario() -> None:
        async with agent(offers_host, "all", mode) as client:
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            assert prompts == [f"{s}__{p}" for s in ("everything", "web") for p in PROMPTS]
            uris = [r.uri for r in (await client.list_resources()).resources]
            assert f"patchbay://everything/{DOCUMENT}" in uris and f"patchbay://web/{DOCUMENT}" in uris
            assert all(u.startswith(("patchbay://everything/", "patchbay://web/")) for u in uris), uris
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            assert f"patchbay://web/{TEMPLATE}" in templates and f"patchbay://everything/{TEMPLATE}" in templates

            read = await client.read_resource(f"patchbay://web/{DOCUMENT}")
            assert read.contents[0].uri == f"patchbay://web/{DOCUMENT}"
            assert isinstance(read.contents[0], types.TextResourceContents)
            assert read.contents[0].text.startswith("# Everything Server")
            made = await client.read_resource(f"patchbay://everything/{TEMPLATE.replace('{resourceId}', '3')}")
            assert made.contents[0].text.startswith("Resource 3: This is a plaintext resource")  # type: ignore[union-attr]

            got = await client.get_prompt("everything__args-prompt", {"city": "Lyon", "state": "Rhône"})
            assert [m.model_dump(mode="json", exclude_none=True) for m in got.messages] == [
                {"role": "user", "content": {"type": "text", "text": "What's weather in Lyon, Rhône?"}}
            ]
            embedded = await client.get_prompt("web__resource-prompt", {"resourceType": "Text", "resourceId": "2"})
            resources = [m.content for m in embedded.messages if isinstance(m.content, types.EmbeddedResource)]
            assert resources and all(r.resource.uri.startswith("patchbay://web/") for r in resources), embedded

            # A URI no server lists, and one of a server with no such name, are clear errors.
            with pytest.raises(mcp.MCPError) as unknown:
                await client.read_resource("patchbay://nowhere/demo://x")
            assert unknown.value.error.code == types.INVALID_PARAMS and "nowhere" in unknown.value.error.message
            with pytest.raises(mcp.MCPError) as missing:
                await client.read_resource("patchbay://web/demo://resource/static/document/nope.md")
            assert "not found" in missing.value.error.message.lower()

    asyncio.run(scenario())
    reads = _reads(offers_host, "all")
    assert ("web", "resource", DOCUMENT, "ok") in reads
    assert ("everything", "prompt", "everything__args-prompt", "ok") in reads
    assert ("web", "resource", "demo://resource/static/document/nope.md", "failed") in reads


@pytest.mark.parametrize("mode", MODES)
def test_a_one_server_unprefixed_view_is_the_server_as_read_directly(
    offers_host: GatewayHost, everything_url: str, mode: str
) -> None:
    async def scenario() -> None:
        async with agent(offers_host, "own", mode) as client, direct(everything_url) as server:
            ours, theirs = await client.list_prompts(), await server.list_prompts()
            assert sorted(_dump(ours.prompts), key=lambda p: p["name"]) == sorted(
                _dump(theirs.prompts), key=lambda p: p["name"]
            )
            ours_r, theirs_r = await client.list_resources(), await server.list_resources()
            assert {r.uri for r in ours_r.resources} == {r.uri for r in theirs_r.resources}
            ours_t, theirs_t = await client.list_resource_templates(), await server.list_resource_templates()
            assert sorted(_dump(ours_t.resource_templates), key=str) == sorted(
                _dump(theirs_t.resource_templates), key=str
            )
            for uri in (DOCUMENT, TEMPLATE.replace("{resourceId}", "7")):
                assert _dump((await client.read_resource(uri)).contents) == _dump(
                    (await server.read_resource(uri)).contents
                )
            arguments = {"resourceType": "Text", "resourceId": "2"}
            assert _dump((await client.get_prompt("resource-prompt", arguments)).messages) == _dump(
                (await server.get_prompt("resource-prompt", arguments)).messages
            )
            ref = types.PromptReference(type="ref/prompt", name="completable-prompt")
            ours_c = await client.complete(ref, {"name": "department", "value": "E"})
            theirs_c = await server.complete(ref, {"name": "department", "value": "E"})
            assert ours_c.completion.values == theirs_c.completion.values and ours_c.completion.values

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", MODES)
def test_a_narrow_view_sees_only_its_prompts_and_servers(offers_host: GatewayHost, mode: str) -> None:
    async def scenario() -> None:
        async with agent(offers_host, "simple", mode) as client:
            assert [p.name for p in (await client.list_prompts()).prompts] == ["everything__simple-prompt"]
            assert (await client.get_prompt("everything__simple-prompt")).messages
            for name in ("everything__args-prompt", "web__simple-prompt"):
                with pytest.raises(mcp.MCPError) as hidden:
                    await client.get_prompt(name, {"city": "x"})
                assert hidden.value.error.code == types.INVALID_PARAMS and "Unknown prompt" in str(hidden.value)
            uris = [r.uri for r in (await client.list_resources()).resources]
            assert uris and all(u.startswith("patchbay://everything/") for u in uris)
            with pytest.raises(mcp.MCPError):
                await client.read_resource(f"patchbay://web/{DOCUMENT}")
            ref = types.PromptReference(type="ref/prompt", name="web__completable-prompt")
            with pytest.raises(mcp.MCPError):
                await client.complete(ref, {"name": "department", "value": "E"})

    asyncio.run(scenario())
    assert not [r for r in _reads(offers_host, "simple") if r[0] == "web"]


def test_reads_name_their_requester_and_are_not_kept(offers_host: GatewayHost) -> None:
    """A read's row says who read what, and how much came back of which types."""

    async def scenario() -> None:
        async with agent(offers_host, "all", "auto") as client:
            await client.read_resource(f"patchbay://everything/{DOCUMENT}")

    asyncio.run(scenario())
    rows = _rows(
        offers_host,
        "SELECT requester_kind, size, parts FROM calls_read WHERE requester_name = 'all' AND kind = 'resource' "
        f"AND target = '{DOCUMENT}' AND server_name = 'everything' ORDER BY id DESC LIMIT 1",
    )
    assert rows, "no row for the read"
    kind, size, parts = rows[0]
    assert kind == "agent" and size > 100
    assert json.loads(parts) == [{"mimeType": "text/markdown", "bytes": size}]


# -- what a server sends during a call --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("server", ["everything", "web"])
def test_a_long_running_tools_progress_reaches_the_agent(offers_host: GatewayHost, mode: str, server: str) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async def scenario() -> types.CallToolResult:
        async with agent(offers_host, "all", mode) as client:
            return await client.call_tool(
                f"{server}__trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=on_progress
            )

    result = asyncio.run(scenario())
    assert not result.is_error, result
    assert "Long running operation completed" in result.content[0].text  # type: ignore[union-attr]
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_no_progress_for_an_agent_that_did_not_ask(offers_host: GatewayHost) -> None:
    """Progress goes only where a progress token asked for it (the SDK adds one only with a callback)."""
    notices: list[Any] = []

    async def on_message(message: Any) -> None:
        notices.append(message)

    async def scenario() -> None:
        async with agent(offers_host, "all", "legacy", message_handler=on_message) as client:
            await client.call_tool("everything__trigger-long-running-operation", {"duration": 0.4, "steps": 2})

    asyncio.run(scenario())
    assert not [n for n in notices if getattr(n, "method", "") == "notifications/progress"]


# -- resource subscriptions ---------------------------------------------------------------------


def test_a_subscribed_resources_updates_reach_a_2025_session(offers_host: GatewayHost) -> None:
    """server-everything announces updates of subscribed resources every few seconds once
    `toggle-subscriber-updates` is on (a tool of its own, through the host as any other)."""
    uri = "patchbay://everything/demo://resource/static/document/features.md"
    updated: list[str] = []

    async def on_message(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/resources/updated":
            updated.append(message.params.uri)

    async def scenario() -> None:
        async with agent(offers_host, "all", "legacy", message_handler=on_message) as client:
            await client.subscribe_resource(uri)
            toggled = await client.call_tool("everything__toggle-subscriber-updates", {})
            try:
                async with asyncio.timeout(30):
                    while not updated:
                        await asyncio.sleep(0.2)
            finally:
                await client.call_tool("everything__toggle-subscriber-updates", {})
            assert not toggled.is_error, toggled
            await client.unsubscribe_resource(uri)

    asyncio.run(scenario())
    assert updated and set(updated) == {uri}


def test_a_listen_stream_naming_a_resource_hears_its_updates(offers_host: GatewayHost) -> None:
    """2026-07-28: the resource named in `subscriptions/listen` is subscribed to while the
    stream is open; its updates arrive on the stream under the agent's URI."""
    uri = "patchbay://web/demo://resource/static/document/startup.md"

    async def scenario() -> list[str]:
        async with agent(offers_host, "all", "auto") as client:
            heard: list[str] = []
            async with client.listen(resource_subscriptions=[uri]) as stream:
                await client.call_tool("web__toggle-subscriber-updates", {})
                try:
                    async with asyncio.timeout(30):
                        async for event in stream:
                            if getattr(event, "uri", None):
                                heard.append(event.uri)  # type: ignore[attr-defined]
                                break
                finally:
                    await client.call_tool("web__toggle-subscriber-updates", {})
            return heard

    assert asyncio.run(scenario()) == [uri]


# -- sampling -----------------------------------------------------------------------------------


def test_a_servers_sampling_request_reaches_the_agent_that_declared_sampling(offers_host: GatewayHost) -> None:
    asked: list[types.CreateMessageRequestParams] = []

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="forty-two"), model="agent-model"
        )

    async def scenario() -> types.CallToolResult:
        async with agent(offers_host, "all", "legacy", sampling_callback=sample) as client:
            return await client.call_tool("everything__trigger-sampling-request", {"prompt": "the answer?"})

    result = asyncio.run(scenario())
    assert not result.is_error, result
    assert "forty-two" in result.content[0].text and "agent-model" in result.content[0].text  # type: ignore[union-attr]
    assert len(asked) == 1 and "the answer?" in asked[0].messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_without_sampling_the_server_is_refused_with_a_clear_error(offers_host: GatewayHost, mode: str) -> None:
    async def scenario() -> types.CallToolResult:
        async with agent(offers_host, "all", mode) as client:
            return await client.call_tool("web__trigger-sampling-request", {"prompt": "hello"})

    result = asyncio.run(scenario())
    assert result.is_error
    assert "runs no model" in result.content[0].text, result  # type: ignore[union-attr]
