"""Rounds of input (SEP-2322) through the host, driven by the SDK's own client.

The reference fixture sits behind a real host (``conformance_host``: a one-server unprefixed
view, the agent ``suite``). A 2026-07-28 server answers a tool call, a prompt filled in or a
resource read with ``input_required``; the host hands the round to a 2026-07-28 agent whose
client declared elicitation, sealed, and sends its answers on to the server when it comes
back. The SDK client drives those rounds itself (its elicitation callback answers), as an
agent's client does. Each request is on record: the call with its requests for input
answered by the agent; each read as one that asked for input, then one that was read.
An agent that answers no rounds of its own is refused, with a reason, and that is on record too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.agents import agent, text
from tests.gateway.conftest import GatewayHost, _rows

pytestmark = pytest.mark.slow

PROMPT = "test_input_required_result_prompt"
ON_RECORD = f"conformance__{PROMPT}"  # a read names a prompt as the catalog does
ASKING_URI = "test://asks-why"  # tests/fixtures/conformance_server.py, not listed


class Answers:
    """An agent's elicitation callback: answers each question with the next of `contents`,
    and keeps the messages it was asked."""

    def __init__(self, *contents: dict[str, Any]) -> None:
        self.contents = list(contents)
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content=self.contents.pop(0))


def _last_id(host: GatewayHost, table: str) -> int:
    return int(_rows(host, f"SELECT COALESCE(MAX(id), 0) FROM {table}")[0][0])


def _reads_since(host: GatewayHost, since: int) -> list[tuple[str, str, str, list[dict[str, Any]]]]:
    rows = _rows(host, f"SELECT kind, target, outcome, parts FROM calls_read WHERE id > {since} ORDER BY id")
    return [(kind, target, outcome, json.loads(parts)) for kind, target, outcome, parts in rows]


def test_an_agent_answers_the_rounds_of_a_prompt_it_fills_in(conformance_host: GatewayHost) -> None:
    since = _last_id(conformance_host, "calls_read")
    answers = Answers({"context": "the quarterly report"})

    async def scenario() -> types.GetPromptResult:
        async with agent(conformance_host, "suite", "auto", elicitation_callback=answers) as client:
            return await client.get_prompt(PROMPT)

    result = asyncio.run(scenario())
    assert answers.asked == ["What context should the prompt use?"]
    shown = [m.content.text for m in result.messages if isinstance(m.content, types.TextContent)]
    assert shown == ["Use the following context: the quarterly report"]
    assert _reads_since(conformance_host, since) == [
        ("prompt", ON_RECORD, "input", [{"key": "user_context", "method": "elicitation/create"}]),
        ("prompt", ON_RECORD, "ok", [{"role": "user", "type": "text", "bytes": 47}]),
    ]


def test_an_agent_answers_the_rounds_of_a_resource_it_reads(conformance_host: GatewayHost) -> None:
    since = _last_id(conformance_host, "calls_read")
    answers = Answers({"reason": "an audit"})

    async def scenario() -> types.ReadResourceResult:
        async with agent(conformance_host, "suite", "auto", elicitation_callback=answers) as client:
            return await client.read_resource(ASKING_URI)

    result = asyncio.run(scenario())
    assert answers.asked == ["Why do you read it?"]
    assert [c.text for c in result.contents if isinstance(c, types.TextResourceContents)] == ["Read because: an audit"]
    outcomes = [(target, outcome) for _, target, outcome, _ in _reads_since(conformance_host, since)]
    assert outcomes == [(ASKING_URI, "input"), (ASKING_URI, "ok")]


def test_an_agent_answers_each_round_of_its_call_on_record_as_its_own(conformance_host: GatewayHost) -> None:
    since = _last_id(conformance_host, "calls_call")
    answers = Answers({"name": "Ada"}, {"color": "green"})

    async def scenario() -> types.CallToolResult:
        async with agent(conformance_host, "suite", "auto", elicitation_callback=answers) as client:
            return await client.call_tool("test_input_required_result_multi_round", {})

    result = asyncio.run(scenario())
    assert not result.is_error, text(result)
    assert text(result) == "Ada likes green."
    assert answers.asked == ["Step 1: What is your name?", "Step 2: What is your favorite color?"]
    calls = _rows(
        conformance_host,
        f"SELECT id, status FROM calls_call WHERE id > {since} AND tool_name = 'conformance__test_input_required_result_multi_round'",
    )
    assert [status for _, status in calls] == ["succeeded"]
    asked = _rows(
        conformance_host,
        "SELECT key, round, status, answered_via, agent_round FROM calls_inputrequest "
        f"WHERE call_id = {calls[0][0]} ORDER BY id",
    )
    assert [(key, status, via, bool(agent_round)) for key, _, status, via, agent_round in asked] == [
        ("step1", "accept", "agent", True),
        ("step2", "accept", "agent", True),
    ]


def test_an_agent_that_answers_no_rounds_is_told_why_and_the_read_is_on_record(
    conformance_host: GatewayHost,
) -> None:
    """A 2026-07-28 client that declared no elicitation: the host does not hand it the round,
    and nobody else can answer a prompt's question (it belongs to no tool call)."""
    since = _last_id(conformance_host, "calls_read")

    async def scenario() -> MCPError:
        async with agent(conformance_host, "suite", "auto") as client:
            with pytest.raises(MCPError) as refused:
                await client.get_prompt(PROMPT)
            return refused.value

    error = asyncio.run(scenario())
    assert "nobody can be asked for this input" in error.error.message
    assert [outcome for _, _, outcome, _ in _reads_since(conformance_host, since)] == ["failed"]
