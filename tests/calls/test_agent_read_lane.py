"""Read-only calls from agents: answered as soon as the server answers, recorded just after.

The agents' endpoint (hostapp/gateway/server.py) answers a read-only call before its ledger
row is written when the policy's decision for the tool was read less than a second ago and
the catalog has not changed since; the row is written by the ledger writer
(hostapp/calls/ledger.py). These tests drive the endpoint's handler in this process, against
a real server through this process's pool, and check that the ledger ends up the same as
when the row is written first, that a policy change applies to the next call, that a slow
call shows as running, and that the writer loses nothing when the database refuses it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from django.db import OperationalError
from django.test import override_settings

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

    def __init__(self, name: str = "reader") -> None:
        from hostapp.gateway.server import AGENT_SCOPE_KEY, AgentInfo, Gateway
        from hostapp.gateway.tokens import create_token

        token, _ = create_token(name)
        self.pk = token.pk
        self.gateway = Gateway()
        info = AgentInfo(token.pk, name, ())
        request = SimpleNamespace(scope={AGENT_SCOPE_KEY: info}, headers={})
        self.ctx = SimpleNamespace(request=request, protocol_version="2026-07-28", session=None)
        self.loop = asyncio.new_event_loop()

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        params = types.CallToolRequestParams(name=name, arguments=arguments or {})
        return self.loop.run_until_complete(self.gateway.call_tool(self.ctx, params))

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def agent(mailbox: Any) -> Iterator[Agent]:
    from hostapp.calls.ledger import writer

    agent = Agent()
    try:
        yield agent
    finally:
        writer.flush()
        agent.close()


@pytest.fixture
def written() -> Iterator[list[Any]]:
    """The ledger writer's submissions, as they happen (the writer still writes them)."""
    from hostapp.calls.ledger import writer

    seen: list[Any] = []
    submit = writer.submit

    def spy(item: Any) -> None:
        seen.append(item)
        submit(item)

    writer.submit = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del writer.submit


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_a_read_only_call_is_recorded_the_same_whether_its_row_comes_first_or_after(
    agent: Agent, written: list[Any]
) -> None:
    from hostapp.calls.ledger import writer
    from hostapp.calls.models import Call

    first = agent.call("mailbox__read", {"message_id": "msg-0001"})  # reads the policy, writes first
    assert not written
    second = agent.call("mailbox__read", {"message_id": "msg-0001"})  # answered, then written
    assert len(written) == 1
    assert not first.is_error and not second.is_error
    assert first.model_dump() == second.model_dump()
    assert writer.flush()

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


def test_with_write_behind_off_every_call_is_written_before_it_runs(agent: Agent, written: list[Any]) -> None:
    from hostapp.calls.models import Call

    with override_settings(PATCHBAY_LEDGER_WRITE_BEHIND=False):
        for _ in range(3):
            assert not agent.call("mailbox__read", {"message_id": "msg-0001"}).is_error
    assert not written and Call.objects.filter(status=Call.SUCCEEDED).count() == 3


def test_a_tool_error_is_recorded_after_the_answer_like_the_server_said_it(agent: Agent, written: list[Any]) -> None:
    from hostapp.calls.ledger import writer
    from hostapp.calls.models import Call

    agent.call("mailbox__read", {"message_id": "msg-0001"})
    result = agent.call("mailbox__read", {"message_id": "no-such-message"})
    assert result.is_error and len(written) == 1
    assert writer.flush()
    call = Call.objects.latest("pk")
    assert call.status == Call.FAILED and call.is_error and call.result is not None
    assert call.result.get("isError") is True
    assert [e.kind for e in call.events.order_by("pk")] == ["created", "failed"]


def test_arguments_the_schema_refuses_get_the_same_answer_as_ever(agent: Agent, written: list[Any]) -> None:
    from hostapp.calls.models import Call

    agent.call("mailbox__read", {"message_id": "msg-0001"})
    result = agent.call("mailbox__read", {"message_id": 7})
    assert result.is_error and "invalid arguments" in _text(result)
    assert not written and Call.objects.count() == 1  # refused before any call, as always


def test_a_rule_applies_to_the_next_call_when_its_change_is_heard(agent: Agent, monkeypatch: Any) -> None:
    from hostapp.calls.models import Call, Rule
    from hostapp.core import events

    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "_send", lambda kind, data: sent.append((kind, data)))
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    Rule.objects.create(server_name="mailbox", action=Rule.BLOCK, reason="reading is off today")
    assert ("policy.changed", {"server": "mailbox"}) in sent
    agent.gateway.forget_routes()  # what the endpoint does when it hears it (hostapp/gateway/asgi.py)
    result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert result.is_error and "reading is off today" in _text(result)
    assert Call.objects.latest("pk").status == Call.BLOCKED


def test_without_any_change_event_a_rule_applies_within_the_freshness_bound(agent: Agent, monkeypatch: Any) -> None:
    from hostapp.calls.models import Call, Rule
    from hostapp.gateway import server

    monkeypatch.setattr(server, "POLICY_FRESH", 0.3)
    agent.call("mailbox__read", {"message_id": "msg-0001"})
    Rule.objects.create(server_name="mailbox", tool_name="mailbox__read", action=Rule.BLOCK, reason="stop")
    time.sleep(0.35)
    result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert result.is_error and "stop" in _text(result)
    assert Call.objects.latest("pk").status == Call.BLOCKED


def test_a_catalog_change_sends_the_next_call_through_the_database(agent: Agent, written: list[Any]) -> None:
    from hostapp.calls.models import Call
    from hostapp.catalog.actions import set_class_override
    from hostapp.catalog.models import DESTRUCTIVE, Tool

    agent.call("mailbox__read", {"message_id": "msg-0001"})
    set_class_override(Tool.objects.select_related("server").get(exposed_name="mailbox__read"), DESTRUCTIVE)
    agent.loop.run_until_complete(agent.gateway.catalog_changed())  # what hearing catalog.changed does
    # Destructive now: the call waits for a person (the agent is told its number at once here).
    with override_settings(PATCHBAY_AGENT_APPROVAL_WAIT=0):
        result = agent.call("mailbox__read", {"message_id": "msg-0001"})
    assert not written
    call = Call.objects.latest("pk")
    assert call.status == Call.WAITING and f"Call #{call.pk}" in _text(result)


def test_the_writer_keeps_rows_while_the_database_refuses_them(
    transactional_db: None, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from hostapp.calls import ledger
    from hostapp.calls.models import Call

    monkeypatch.setattr(ledger, "RETRY_FIRST", 0.05)
    write = ledger.write
    refusals = {"left": 3}

    def flaky(batch: list[ledger.Finished], **options: Any) -> list[Any]:
        if refusals["left"]:
            refusals["left"] -= 1
            raise OperationalError("database is locked")
        return write(batch, **options)

    monkeypatch.setattr(ledger, "write", flaky)
    writer = ledger.LedgerWriter()
    caplog.set_level(logging.WARNING, logger="hostapp.calls.ledger")
    for i in range(3):
        writer.submit(_finished(f"t{i}"))
    wait_until(lambda: not writer.accepting(), timeout=5, what="the writer to say it is failing")
    assert writer.flush(10)
    assert writer.accepting()
    assert sorted(Call.objects.values_list("tool_name", flat=True)) == ["ops__t0", "ops__t1", "ops__t2"]
    assert "retrying" in caplog.text
    writer.stop()


def test_a_batch_whose_commit_went_through_before_the_connection_was_lost_is_not_written_twice(
    transactional_db: None, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The double fault: the batch is committed, then the connection drops before the writer
    hears so. The retry finds the rows by their write keys and writes only what is missing."""
    from hostapp.calls import ledger
    from hostapp.calls.models import Call

    monkeypatch.setattr(ledger, "RETRY_FIRST", 0.05)
    write = ledger.write
    attempts: list[bool] = []

    def lost_after_commit(batch: list[ledger.Finished], **options: Any) -> list[Any]:
        attempts.append(options.get("retry", False))
        written = write(batch, **options)
        if len(attempts) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return written

    monkeypatch.setattr(ledger, "write", lost_after_commit)
    writer = ledger.LedgerWriter()
    caplog.set_level(logging.WARNING, logger="hostapp.calls.ledger")
    items = [_finished(f"t{i}") for i in range(3)]
    for item in items:
        writer.submit(item)
    assert writer.flush(10)
    assert attempts[0] is False and attempts[1:] and all(attempts[1:])
    assert sorted(Call.objects.values_list("tool_name", flat=True)) == ["ops__t0", "ops__t1", "ops__t2"]
    assert {c.write_key for c in Call.objects.all()} == {item.fields["write_key"] for item in items}
    assert "retrying" in caplog.text
    writer.stop()


def test_a_retry_writes_the_calls_of_the_batch_that_are_not_there_yet(transactional_db: None) -> None:
    from hostapp.calls import ledger
    from hostapp.calls.models import Call

    items = [_finished(f"t{i}") for i in range(3)]
    for item in items:
        item.fields["write_key"] = uuid.uuid4()
    ledger.write(items[:1])
    ledger.write(items, retry=True)
    assert sorted(Call.objects.values_list("tool_name", flat=True)) == ["ops__t0", "ops__t1", "ops__t2"]
    assert ledger.write(items, retry=True) == []
    assert Call.objects.count() == 3


def test_a_row_the_database_cannot_take_is_logged_and_the_others_written(
    transactional_db: None, caplog: pytest.LogCaptureFixture
) -> None:
    from hostapp.calls import ledger
    from hostapp.calls.models import Call

    writer = ledger.LedgerWriter()
    broken = _finished("broken")
    broken.fields["server_name"] = None  # NOT NULL
    caplog.set_level(logging.ERROR, logger="hostapp.calls.ledger")
    for item in (_finished("a"), broken, _finished("b")):
        writer.submit(item)
    assert writer.flush(10)
    assert sorted(Call.objects.values_list("tool_name", flat=True)) == ["ops__a", "ops__b"]
    assert "refuses" in caplog.text and "ops__broken" in caplog.text
    writer.stop()


def test_a_result_the_database_refuses_is_recorded_with_a_note_instead(
    transactional_db: None, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL takes no NaN (nor a NUL byte) in JSON, SQLite's JSON check no NaN: the call
    is on record all the same, its result replaced by why it is not kept."""
    from hostapp.calls import ledger
    from hostapp.calls.models import Call

    writer = ledger.LedgerWriter()
    odd = _finished("odd")
    odd.fields["result"] = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"v": float("nan")}}
    caplog.set_level(logging.WARNING, logger="hostapp.calls.ledger")
    for item in (_finished("a"), odd):
        writer.submit(item)
    assert writer.flush(10)
    rows = {c.tool_name: c for c in Call.objects.all()}
    assert sorted(rows) == ["ops__a", "ops__odd"]
    assert rows["ops__a"].result == {"content": [{"type": "text", "text": "a"}], "isError": False}
    note = rows["ops__odd"].result["content"][0]["text"]
    assert note.startswith("not stored: the database refused it"), note
    assert rows["ops__odd"].status == Call.SUCCEEDED
    assert "without what the database refuses" in caplog.text
    writer.stop()


def test_a_slow_read_only_call_shows_as_running_while_it_runs(
    transactional_db: None, tmp_path: Path, monkeypatch: Any
) -> None:
    from hostapp.calls.ledger import writer
    from hostapp.calls.models import Call
    from hostapp.catalog.actions import refresh_server, set_class_override
    from hostapp.catalog.models import READ_ONLY, Server, Tool
    from hostapp.catalog.pool import close_pool
    from hostapp.gateway import server as gateway_server

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
        seen: list[str] = []

        async def call_and_watch() -> types.CallToolResult:
            from asgiref.sync import sync_to_async

            params = types.CallToolRequestParams(name="slowpoke__slow", arguments={"seconds": 1.5})
            task = asyncio.ensure_future(agent.gateway.call_tool(agent.ctx, params))
            await asyncio.sleep(0.8)
            seen.append(await sync_to_async(lambda: Call.objects.latest("pk").status)())
            return await task

        result = agent.loop.run_until_complete(call_and_watch())
        assert not result.is_error
        assert seen == [Call.RUNNING]
        call = Call.objects.latest("pk")
        assert call.status == Call.SUCCEEDED and call.duration_ms >= 1400
        assert [e.kind for e in call.events.order_by("pk")] == ["created", "succeeded"]
        assert Call.objects.count() == 2
        assert writer.flush()
    finally:
        if agent is not None:
            agent.close()
        close_pool()


def _finished(name: str) -> Any:
    """A finished read-only call of a tool that is not in the catalog (the row keeps no link)."""
    from django.utils import timezone

    from hostapp.calls.actions import Requester, finished_call
    from hostapp.calls.models import Call
    from hostapp.calls.policy import Decision

    tool = SimpleNamespace(
        pk=None,
        server=SimpleNamespace(name="ops"),
        exposed_name=f"ops__{name}",
        original_name=name,
        effective_class="read_only",
        definition_hash="0" * 64,
    )
    return finished_call(
        tool,  # type: ignore[arg-type]
        Decision(Call.RUN, "read-only"),
        Requester(Call.CLI, "cli"),
        {},
        timezone.now(),
        {"content": [{"type": "text", "text": name}], "isError": False},
        None,
        0.001,
    )
