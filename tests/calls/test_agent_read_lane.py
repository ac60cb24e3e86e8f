"""Read-only calls from agents: sent to the server at once, on record before the answer.

The agents' endpoint (hostapp/gateway/server.py) sends a read-only call straight to its
server when the policy's decision for the tool was read less than a second ago and the
catalog has not changed since; the call's row and events are written in one transaction
when the server has answered, before the agent hears it. These tests drive the endpoint's
handler in this process, against a real server through this process's pool, and check that
the ledger ends up the same as when the row is written first, that it is there before the
answer, that a policy change applies to the next call, that a slow call shows as running,
and that a call the agent gave up on is on record too. (That a web process killed right
after an answer loses no row: tests/gateway/test_killed_web.py.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from hostapp.calls.models import Call, Rule
from hostapp.catalog.actions import set_class_override
from hostapp.catalog.models import DESTRUCTIVE, READ_ONLY, Server, Tool
from hostapp.catalog.pool import close_pool, refresh_server
from hostapp.core import events
from hostapp.gateway import server as gateway_server
from hostapp.gateway.agent_view import AgentInfo, AgentView
from hostapp.gateway.server import AGENT_SCOPE_KEY, Gateway
from hostapp.gateway.tokens import create_token
from tests.helpers import REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = str(REPO / "tests" / "fixtures" / "hostile_server.py")


def _call_fields(call: Any) -> dict[str, Any]:
    """What two calls of the same tool with the same arguments must share in the ledger."""
    return {
        "requester_kind": call.requester_kind,
        "requester_name": call.requester_name,
        "requester_agent_id": call.requester_agent_id,
        "server_name": call.server_name,
        "tool_name": call.tool_name,
        "original_name": call.original_name,
        "tool_id": call.tool_id,
        "tool_class": call.tool_class,
        "definition_hash": call.definition_hash,
        "arguments": call.arguments,
        "argument_digest": call.argument_digest,
        "decision": call.decision,
        "decision_reason": call.decision_reason,
        "status": call.status,
        "attempts": call.attempts,
        "result": call.result,
        "is_error": call.is_error,
        "error": call.error,
        "events": [(e.kind, e.actor, e.detail) for e in call.events.order_by("pk")],
    }


class Agent:
    """The endpoint's handler, called as the SDK calls it for one agent's requests."""

    def __init__(self, name: str = "reader", gateway: Gateway | None = None) -> None:
        token, _ = create_token(name)
        self.pk = token.pk
        self.gateway = gateway or Gateway()
        info = AgentInfo(token.pk, name, AgentView())
        request = SimpleNamespace(scope={AGENT_SCOPE_KEY: info}, headers={})
        self.ctx = SimpleNamespace(request=request, protocol_version="2026-07-28", session=None)
        self.loop = asyncio.new_event_loop()

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        params = types.CallToolRequestParams(name=name, arguments=arguments or {})
        return self.loop.run_until_complete(self.gateway.call_tool(self.ctx, params))

    def close(self) -> None:
        self.loop.close()

    async def acall(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        params = types.CallToolRequestParams(name=name, arguments=arguments or {})
        return await self.gateway.call_tool(self.ctx, params)

    def fast(self, name: str, arguments: dict[str, Any]) -> bool:
        """Whether the next call of `name` with `arguments` goes to the server before its row
        is written (the endpoint's decision cache holds its tool and the pool runs it)."""
        return self.gateway._fresh_route(name, arguments) is not None


@pytest.fixture
def agent(mailbox: Any) -> Iterator[Agent]:
    agent = Agent()
    try:
        yield agent
    finally:
        agent.close()


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_a_read_only_call_is_recorded_the_same_whether_it_reads_the_policy_or_not(agent: Agent) -> None:
    first = agent.call("mailbox__read", {"message_id": "msg-0001"})  # reads the policy, writes first
    assert agent.fast("mailbox__read", {"message_id": "msg-0001"})
    second = agent.call("mailbox__read", {"message_id": "msg-0001"})  # straight to the server
    assert not first.is_error and not second.is_error
    assert first.model_dump() == second.model_dump()

    calls = list(Call.objects.order_by("pk"))
    assert len(calls) == 2
    before, after = (_call_fields(c) for c in calls)
    assert after == before
    assert after["requester_agent_id"] == agent.pk and after["decision"] == Call.RUN
    assert after["status"] == Call.SUCCEEDED and after["attempts"] == 1
    assert [kind for kind, _, _ in after["events"]] == ["created", "succeeded"]
    for call in calls:
        assert call.started_at <= call.finished_at and call.duration_ms is not None
    created, succeeded = calls[1].events.order_by("pk")
    assert calls[1].created_at == calls[1].started_at == created.at  # when it was made, not written
    assert succeeded.at == calls[1].finished_at


def test_the_row_is_committed_before_the_agent_hears_the_answer(agent: Agent) -> None:
    """The row is read from another connection (a thread of its own) the moment the
    handler returns: nothing is left to write after the answer."""
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert agent.fast("mailbox__read", {"message_id": "msg-0002"})

    async def answer_then_look() -> tuple[types.CallToolResult, list[str]]:
        result = await agent.acall("mailbox__read", {"message_id": "msg-0002"})
        rows = await sync_to_async(
            lambda: [c.status for c in Call.objects.filter(arguments__message_id="msg-0002")], thread_sensitive=False
        )()
        return result, rows

    result, rows = agent.loop.run_until_complete(answer_then_look())
    assert not result.is_error
    assert rows == [Call.SUCCEEDED]


def test_a_tool_error_is_recorded_like_the_server_said_it(agent: Agent) -> None:
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert agent.fast("mailbox__read", {"message_id": "no-such-message"})
    result = agent.call("mailbox__read", {"message_id": "no-such-message"})
    assert result.is_error
    call = Call.objects.latest("pk")
    assert call.status == Call.FAILED and call.is_error and call.result is not None
    assert call.result.get("isError") is True
    assert [e.kind for e in call.events.order_by("pk")] == ["created", "failed"]


def test_a_call_written_after_its_tool_was_deleted_is_on_record_without_the_link(agent: Agent) -> None:
    """A refresh removed the tool while its call was at the server (the endpoint had not
    heard of it yet): the call is on record all the same, as deleting the tool afterwards
    would leave it."""
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert agent.fast("mailbox__read", {"message_id": "msg-0001"})
    Tool.objects.filter(exposed_name="mailbox__read").delete()

    assert not agent.call("mailbox__read", {"message_id": "msg-0001"}).is_error

    call = Call.objects.latest("pk")
    assert (call.status, call.tool_id, call.tool_name) == (Call.SUCCEEDED, None, "mailbox__read")


def test_arguments_the_schema_refuses_get_the_same_answer_as_ever(agent: Agent) -> None:
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    result = agent.call("mailbox__read", {"message_id": 7})
    assert result.is_error and "invalid arguments" in _text(result)
    assert Call.objects.count() == 1  # refused before any call, as always


def test_a_rule_applies_to_the_next_call_when_its_change_is_heard(agent: Agent, monkeypatch: Any) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "_send", lambda kind, data: sent.append((kind, data)))
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    Rule.objects.create(server_name="mailbox", action=Rule.BLOCK, reason="reading is off today")
    assert ("policy.changed", {"server": "mailbox"}) in sent
    agent.gateway.forget_routes()  # what the endpoint does when it hears it (hostapp/gateway/asgi.py)
    result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert result.is_error and "reading is off today" in _text(result)
    assert Call.objects.latest("pk").status == Call.BLOCKED


def test_without_any_change_event_a_rule_applies_once_the_decision_is_older_than_the_bound(agent: Agent) -> None:
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    Rule.objects.create(server_name="mailbox", tool_name="mailbox__read", action=Rule.BLOCK, reason="stop")
    route = agent.gateway.routes["mailbox__read"]
    # The decision as old as the bound allows: the next call reads the rules again.
    agent.gateway.routes["mailbox__read"] = dataclasses.replace(
        route, read_at=route.read_at - gateway_server.POLICY_FRESH
    )
    result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert result.is_error and "stop" in _text(result)
    assert Call.objects.latest("pk").status == Call.BLOCKED


def test_a_catalog_change_sends_the_next_call_through_the_database(agent: Agent) -> None:
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    set_class_override(Tool.objects.select_related("server").get(exposed_name="mailbox__read"), DESTRUCTIVE)
    agent.loop.run_until_complete(agent.gateway.catalog_changed())  # what hearing catalog.changed does
    assert not agent.fast("mailbox__read", {"message_id": "msg-0001"})
    # Destructive now: the call waits for a person (the agent is told its number at once here).
    with override_settings(PATCHBAY_AGENT_APPROVAL_WAIT=0):
        result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    call = Call.objects.latest("pk")
    assert call.status == Call.WAITING and f"Call #{call.pk}" in _text(result)


@pytest.fixture
def slowpoke(transactional_db: None, tmp_path: Path, monkeypatch: Any) -> Iterator[Agent]:
    """An agent of a trusted server whose `slow` and `echo` are read-only; its policy read."""
    monkeypatch.setattr(gateway_server, "RUNNING_VISIBLE_AFTER", 0.2)
    server = Server.objects.create(
        name="slowpoke", transport="stdio", command=sys.executable, args=[HOSTILE, "well"], trusted=True
    )
    agent = None
    try:
        assert refresh_server(server).ok
        for name in ("slowpoke__slow", "slowpoke__echo"):
            set_class_override(Tool.objects.select_related("server").get(exposed_name=name), READ_ONLY)
        agent = Agent()
        agent.call("slowpoke__slow", {"seconds": 0})  # the policy read, the row first
        assert agent.fast("slowpoke__slow", {"seconds": 1})
        yield agent
    finally:
        if agent is not None:
            agent.close()
        close_pool()


def test_a_slow_read_only_call_shows_as_running_while_it_runs(slowpoke: Agent) -> None:
    seen: list[str] = []

    async def call_and_watch() -> types.CallToolResult:
        task = asyncio.ensure_future(slowpoke.acall("slowpoke__slow", {"seconds": 1.5}))

        def running() -> bool:
            return Call.objects.filter(status=Call.RUNNING).exists()

        await sync_to_async(wait_until, thread_sensitive=False)(running, timeout=1.2, what="the call shown running")
        seen.append(Call.RUNNING)
        return await task

    result = slowpoke.loop.run_until_complete(call_and_watch())
    assert not result.is_error
    assert seen == [Call.RUNNING]
    call = Call.objects.latest("pk")
    assert call.status == Call.SUCCEEDED and call.duration_ms >= 1400
    assert [e.kind for e in call.events.order_by("pk")] == ["created", "succeeded"]
    assert Call.objects.count() == 2


@pytest.mark.parametrize("shown", [False, True], ids=["before-it-shows-running", "while-it-shows-running"])
def test_a_call_the_agent_gave_up_on_is_on_record_as_ended_by_it(slowpoke: Agent, shown: bool) -> None:
    async def give_up() -> None:
        task = asyncio.ensure_future(slowpoke.acall("slowpoke__slow", {"seconds": 3}))
        if shown:

            def running() -> bool:
                return Call.objects.filter(status=Call.RUNNING).exists()

            await sync_to_async(wait_until, thread_sensitive=False)(running, timeout=2, what="the call shown running")
        else:
            await asyncio.sleep(0.05)  # the agent's patience: well under RUNNING_VISIBLE_AFTER
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        def ended() -> bool:
            return Call.objects.filter(status=Call.FAILED).exists()

        await sync_to_async(wait_until, thread_sensitive=False)(ended, timeout=10, what="the abandoned call on record")

    slowpoke.loop.run_until_complete(give_up())
    call = Call.objects.get(status=Call.FAILED)
    assert call.error is not None and call.error.get("reason") == "cancelled"
    assert [e.kind for e in call.events.order_by("pk")] == ["created", "failed"]
    assert Call.objects.count() == 2
