"""A server's request for input during an agent's call on /mcp (hostapp/calls/inputs.py).

server-everything sits behind the offers host (test_offers.py) twice, trusted: its
`trigger-elicitation-request` runs in the web process for `everything` (an admin's read-only
override) and through the outbox, in a worker, for `web` (a write tool, as listed). The agent
is the SDK client in both eras:

* a 2025-era client that declared elicitation answers for itself (its callback gets the
  server's request on its session), on record as the agent's answer;
* a 2026-07-28 client waits while a person answers (here: the host's own action, as the
  Input page calls it), hearing progress meanwhile: server-everything is a 2025-era server,
  whose request is held open on the host's connection (a 2026-07-28 server's round is
  handed to an agent that declared elicitation: the conformance suite through the host);
* a call delivered by a worker is answered by a person whoever the agent is: the worker has
  no line to the agent's session.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest

from tests.gateway.agents import agent, text
from tests.gateway.conftest import GatewayHost, _rows
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

HERE = "everything__trigger-elicitation-request"  # runs in the web process
WORKER = "web__trigger-elicitation-request"  # delivered by a worker


@pytest.fixture(scope="module")
def host(offers_host: GatewayHost) -> GatewayHost:
    offers_host.manage(
        "shell",
        "-c",
        "from hostapp.catalog import actions; from hostapp.catalog.models import Tool; "
        f"actions.set_class_override(Tool.objects.get(exposed_name='{HERE}'), 'read_only')",
    )
    return offers_host


def _inputs(host: GatewayHost, call_tool: str) -> list[tuple[Any, ...]]:
    return _rows(
        host,
        "SELECT i.id, i.status, i.answered_via, c.id FROM calls_inputrequest i JOIN calls_call c ON c.id = i.call_id "
        f"WHERE c.tool_name = '{call_tool}' ORDER BY i.id",
    )


def _answer_as_a_person(host: GatewayHost, tool: str, seen: int, name: str) -> int:
    """Wait for a new open request of `tool`'s calls, then answer it as a person would."""
    wait_until(
        lambda: len(_inputs(host, tool)) > seen and _inputs(host, tool)[-1][1] == "open",
        timeout=60,
        what=f"a request for input of {tool}",
    )
    pk = _inputs(host, tool)[-1][0]
    host.manage(
        "shell",
        "-c",
        f"from hostapp.calls import inputs; inputs.answer({pk}, 'accept', {{'name': {name!r}}}, name='tester')",
    )
    return int(pk)


async def _never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    raise AssertionError("this request is not the agent's to answer")


def _person_answers(host: GatewayHost, tool: str, mode: str, name: str, **kw: Any) -> types.CallToolResult:
    """The agent calls `tool` (in `mode`, with the client's `kw`) while a person answers the
    request for input with `name`; the call's result, once it is on record as the person's."""
    progress = kw.pop("progress", None)

    async def scenario() -> types.CallToolResult:
        async with agent(host, "all", mode, **kw) as client:
            return await client.call_tool(tool, {}, progress_callback=progress)

    before = len(_inputs(host, tool))

    async def both() -> types.CallToolResult:
        call = asyncio.ensure_future(scenario())
        await asyncio.to_thread(_answer_as_a_person, host, tool, before, name)
        return await call

    result = asyncio.run(both())
    assert not result.is_error, text(result)
    assert f"- Name: {name}" in text(result)
    rows = _inputs(host, tool)[before:]
    assert [(status, via) for _, status, via, _ in rows] == [("accept", "person")]
    assert _rows(host, f"SELECT status FROM calls_call WHERE id = {rows[0][3]}") == [("succeeded",)]
    return result


def test_a_2025_agent_that_declared_elicitation_answers_for_itself(host: GatewayHost) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": "Agent Smith", "check": True})

    async def scenario() -> types.CallToolResult:
        async with agent(host, "all", "legacy", elicitation_callback=answer) as client:
            return await client.call_tool(HERE, {})

    before = len(_inputs(host, HERE))
    result = asyncio.run(scenario())

    assert not result.is_error, text(result)
    assert "- Name: Agent Smith" in text(result) and "- Agreed to terms: true" in text(result)
    assert len(asked) == 1 and isinstance(asked[0], types.ElicitRequestFormParams)
    assert asked[0].requested_schema["required"] == ["name"]
    rows = _inputs(host, HERE)[before:]
    assert [(status, via) for _, status, via, _ in rows] == [("accept", "agent")]


def test_a_2026_agent_calling_a_2025_server_waits_for_a_person_even_if_it_declared_elicitation(
    host: GatewayHost,
) -> None:
    """The 2025-era server's request is held open on the host's connection, which a round
    handed to the agent could not come back to (its call again may reach another web
    process): a person answers. (A 2026-07-28 server's round is handed on: the conformance
    suite's input-required-result scenarios through the host, tests/conformance.)"""

    _person_answers(host, HERE, "auto", "Pat Modern", elicitation_callback=_never)


def test_a_2026_agent_waits_while_a_person_answers_hearing_progress(host: GatewayHost) -> None:
    progress: list[str] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    _person_answers(host, HERE, "auto", "Pat Person", progress=heard)
    assert any("waits for a person's input, asked by everything" in m for m in progress), progress


def test_a_call_a_worker_delivers_is_answered_by_a_person(host: GatewayHost) -> None:
    # The worker has no line to the agent's session: a person answers, whatever it declared.
    _person_answers(host, WORKER, "legacy", "Wanda Worker", elicitation_callback=_never)
