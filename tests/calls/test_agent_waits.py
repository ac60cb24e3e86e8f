"""An agent waiting for a call is woken by the call's moves, heard on the channel layer from
whichever process made them (hostapp/gateway/asgi.py `_follow_catalog`), not by reading the
database again and again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async

from hostapp.calls import actions
from hostapp.calls.models import Call
from hostapp.gateway import server as gateway_server
from hostapp.gateway.asgi import GatewayApp
from tests.calls.test_agent_read_lane import Agent
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_an_agent_waiting_for_approval_hears_it_at_once(
    ops: Any, approver: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PATCHBAY_AGENT_APPROVAL_WAIT = 60
    settings.PATCHBAY_AGENT_WRITE_WAIT = 0  # approved, it answers "queued" (no worker here)
    monkeypatch.setattr(gateway_server, "RECHECK", 30.0)  # only the move's event can wake it in time
    app = GatewayApp()
    agent = Agent("waiter", gateway=app.gateway)
    progress: list[str] = []

    class Session:
        client_capabilities = None  # declared nothing: no round of input is handed to it

        async def report_progress(self, progress_: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

    agent.ctx.session = Session()

    async def scenario() -> tuple[types.CallToolResult, float]:
        listener = asyncio.ensure_future(app._follow_catalog())
        try:
            waiting = asyncio.ensure_future(agent.acall("ops__wipe", {"disk": "sdb"}))

            def waiting_call() -> int | None:
                return Call.objects.filter(status=Call.WAITING).values_list("pk", flat=True).first()

            call_id = await sync_to_async(wait_until, thread_sensitive=False)(
                waiting_call, timeout=20, what="the call waiting for approval"
            )
            await sync_to_async(wait_until, thread_sensitive=False)(
                lambda: bool(progress), timeout=20, what="the agent waiting"
            )
            approved_at = time.monotonic()
            await sync_to_async(actions.approve, thread_sensitive=False)(call_id, approver)
            result = await asyncio.wait_for(waiting, timeout=20)
            return result, time.monotonic() - approved_at
        finally:
            listener.cancel()

    try:
        result, took = agent.loop.run_until_complete(scenario())
    finally:
        agent.close()
    assert "queued" in _text(result), _text(result)
    assert took < 5.0, took  # a read every RECHECK (30 s) could not have answered it
