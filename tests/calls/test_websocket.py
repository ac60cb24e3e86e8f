"""The live socket and calls: events leave after commit, only logged-in same-origin
sockets connect, and only approvers may decide over it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client

from hostapp.asgi import application
from hostapp.calls import actions
from hostapp.calls.models import Call, Rule
from hostapp.catalog.models import Server
from hostapp.core import events
from hostapp.outbox.models import Action

from .conftest import requester

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.anyio]

ORIGIN = "http://127.0.0.1:8000"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def socket_for(user: User | None, origin: str = ORIGIN) -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1:8000")]
    if user is not None:
        cookie = await sync_to_async(_session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/live/", headers=headers)


async def connected(user: User) -> WebsocketCommunicator:
    """A joined socket; events from before it (the fixtures') have already left."""
    await asyncio.to_thread(events.flush)
    comm = await socket_for(user)
    ok, _ = await comm.connect()
    assert ok
    return comm


async def receive_until(
    comm: WebsocketCommunicator, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Every message until `done(messages)` holds; fails after `timeout` seconds."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done(messages):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out; received {messages}"
        messages.append(await comm.receive_json_from(timeout=remaining))
    return messages


def of_type(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == kind]


def wipe() -> Call:
    return actions.start_call("ops__wipe", {"disk": "sdb"}, requester(name="deploy-bot"))


def status_of(call_id: int) -> str:
    return Call.objects.get(pk=call_id).status


# --- who may connect ------------------------------------------------------------------------------


async def test_an_unauthenticated_socket_is_refused() -> None:
    comm = await socket_for(None)

    connected_, code = await comm.connect()

    assert not connected_
    assert code == 4401
    await comm.disconnect()


async def test_a_cross_origin_socket_is_refused_even_with_a_session(plain_user: User) -> None:
    comm = await socket_for(plain_user, origin="http://evil.example")

    connected_, _ = await comm.connect()

    assert not connected_
    await comm.disconnect()


# --- events after commit -------------------------------------------------------------------------------


async def test_a_calls_event_arrives_only_after_its_transaction_commits(ops: Server, plain_user: User) -> None:
    comm = await connected(plain_user)
    inside, release = threading.Event(), threading.Event()

    def make_call_and_hold_the_transaction() -> Call:
        try:
            with transaction.atomic():
                call = wipe()
                inside.set()
                assert release.wait(timeout=10)
            return call
        finally:
            connection.close()

    making = asyncio.ensure_future(sync_to_async(make_call_and_hold_the_transaction, thread_sensitive=False)())
    assert await asyncio.to_thread(inside.wait, 10)

    # The row exists inside the open transaction; nothing has left yet.
    assert await comm.receive_nothing(timeout=0.3)
    release.set()
    call = await making

    message = await comm.receive_json_from(timeout=5)
    assert message == {"type": "call.changed", "data": {"id": call.pk, "status": "waiting", "tool": "ops__wipe"}}
    await comm.disconnect()


async def test_a_rolled_back_call_sends_nothing(ops: Server, plain_user: User) -> None:
    comm = await connected(plain_user)

    def make_call_then_roll_back() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            wipe()
            raise RuntimeError("roll back")

    await sync_to_async(make_call_then_roll_back)()

    assert await comm.receive_nothing(timeout=0.3)
    assert not await sync_to_async(Call.objects.exists)()
    await comm.disconnect()


# --- deciding over the socket ------------------------------------------------------------------------------


async def test_an_approver_approves_over_the_socket(ops: Server, approver: User) -> None:
    call = await sync_to_async(wipe)()
    comm = await connected(approver)

    await comm.send_json_to({"action": "approve", "call_id": call.pk})
    messages = await receive_until(
        comm,
        lambda ms: (
            bool(of_type(ms, "decided"))
            and any(m["data"].get("status") == "queued" for m in of_type(ms, "call.changed"))
        ),
    )

    assert of_type(messages, "decided") == [{"type": "decided", "data": {"call_id": call.pk, "status": "queued"}}]
    assert await sync_to_async(status_of)(call.pk) == Call.QUEUED
    assert await sync_to_async(Action.objects.filter(call_id=call.pk).count)() == 1
    await comm.disconnect()


async def test_an_approver_may_always_allow_over_the_socket(ops: Server, approver: User) -> None:
    call = await sync_to_async(wipe)()
    comm = await connected(approver)

    await comm.send_json_to({"action": "approve", "call_id": call.pk, "always": True})
    await receive_until(comm, lambda ms: bool(of_type(ms, "decided")))

    rule = await sync_to_async(Rule.objects.get)()
    assert (rule.tool_name, rule.action, rule.created_by_id) == ("ops__wipe", Rule.ALLOW, approver.pk)
    await comm.disconnect()


async def test_an_approver_denies_over_the_socket_and_the_caller_gets_the_reason(ops: Server, approver: User) -> None:
    call = await sync_to_async(wipe)()
    comm = await connected(approver)

    await comm.send_json_to({"action": "deny", "call_id": call.pk, "reason": "Not that disk."})
    messages = await receive_until(comm, lambda ms: bool(of_type(ms, "decided")))

    assert of_type(messages, "decided") == [{"type": "decided", "data": {"call_id": call.pk, "status": "denied"}}]
    denied = await sync_to_async(Call.objects.get)(pk=call.pk)
    assert denied.error == {"kind": "denied", "message": "Denied: Not that disk."}
    await comm.disconnect()


@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_a_user_without_the_permission_cannot_decide_over_the_socket(
    ops: Server, plain_user: User, action: str
) -> None:
    call = await sync_to_async(wipe)()
    comm = await connected(plain_user)

    await comm.send_json_to({"action": action, "call_id": call.pk, "reason": "because", "always": True})
    reply = await comm.receive_json_from(timeout=5)

    assert reply == {"type": "error", "data": {"message": "you do not have the approve permission"}}
    # Nothing changed, so nothing is broadcast either.
    assert await comm.receive_nothing(timeout=0.3)
    assert await sync_to_async(status_of)(call.pk) == Call.WAITING
    assert not await sync_to_async(Rule.objects.exists)()
    await comm.disconnect()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"action": "delete", "call_id": 1}, "unknown action"),
        ("approve", "unknown action"),
        ({"action": "approve", "call_id": "one"}, "call_id must be a number"),
        ({"action": "approve", "call_id": 999}, "no call #999"),
    ],
)
async def test_a_malformed_request_over_the_socket_gets_an_error(approver: User, content: Any, message: str) -> None:
    comm = await connected(approver)

    await comm.send_json_to(content)

    assert await comm.receive_json_from(timeout=5) == {"type": "error", "data": {"message": message}}
    await comm.disconnect()


async def test_a_denial_over_the_socket_needs_a_reason(ops: Server, approver: User) -> None:
    call = await sync_to_async(wipe)()
    comm = await connected(approver)

    await comm.send_json_to({"action": "deny", "call_id": call.pk, "reason": " "})

    assert await comm.receive_json_from(timeout=5) == {
        "type": "error",
        "data": {"message": "a denial needs a reason: the caller receives it"},
    }
    assert await sync_to_async(status_of)(call.pk) == Call.WAITING
    await comm.disconnect()


async def test_the_second_approval_over_the_socket_is_refused(ops: Server, approver: User) -> None:
    call = await sync_to_async(wipe)()
    await sync_to_async(actions.approve)(call.pk, approver)
    comm = await connected(approver)

    await comm.send_json_to({"action": "approve", "call_id": call.pk})

    assert await comm.receive_json_from(timeout=5) == {
        "type": "error",
        "data": {"message": f"call #{call.pk} is queued, not waiting for approval"},
    }
    await comm.disconnect()
