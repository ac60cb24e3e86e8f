"""The live websocket: only for logged-in users, events leave after commit."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from hostapp.asgi import application
from hostapp.core.events import send_event_on_commit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def _connect(cookie: str | None, origin: str = "http://127.0.0.1:8000") -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/live/", headers=headers)


async def test_an_anonymous_socket_is_refused() -> None:
    comm = await _connect(None)
    connected, code = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_a_cross_origin_socket_is_refused() -> None:
    user = await sync_to_async(User.objects.create_user)("olivia", password="pw-olivia-1")
    cookie = await sync_to_async(_session_cookie)(user)
    comm = await _connect(cookie, origin="http://evil.example")
    connected, _ = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_events_reach_a_logged_in_socket_only_after_commit() -> None:
    user = await sync_to_async(User.objects.create_user)("olivia", password="pw-olivia-1")
    cookie = await sync_to_async(_session_cookie)(user)
    comm = await _connect(cookie)
    connected, _ = await comm.connect()
    assert connected

    committed = asyncio.Event()

    def change() -> None:
        with transaction.atomic():
            send_event_on_commit("server.changed", {"name": "mailbox"})
            # Inside the transaction nothing has left yet.
            assert not committed.is_set()
        committed.set()

    rolled_back_sent = False

    def rolled_back() -> None:
        nonlocal rolled_back_sent
        try:
            with transaction.atomic():
                send_event_on_commit("server.changed", {"name": "never"})
                raise RuntimeError("roll back")
        except RuntimeError:
            rolled_back_sent = True

    await sync_to_async(rolled_back)()
    assert rolled_back_sent
    assert await comm.receive_nothing(timeout=0.3)
    await sync_to_async(change)()
    message = await comm.receive_json_from(timeout=5)
    assert message == {"type": "server.changed", "data": {"name": "mailbox"}}
    await comm.disconnect()


async def test_a_burst_of_events_arrives_in_order_with_one_event_per_object() -> None:
    """What is queued together leaves as one channel message; an object's latest event wins,
    in the place of its last change; events without an id are all kept."""
    user = await sync_to_async(User.objects.create_user)("olivia", password="pw-olivia-1")
    comm = await _connect(await sync_to_async(_session_cookie)(user))
    assert (await comm.connect())[0]

    def burst() -> None:
        with transaction.atomic():
            send_event_on_commit("call.changed", {"id": 1, "status": "running"})
            send_event_on_commit("call.changed", {"id": 2, "status": "running"})
            send_event_on_commit("outbox.changed", {"ids": [7, 8], "status": "leased"})
            send_event_on_commit("call.changed", {"id": 1, "status": "succeeded"})
            send_event_on_commit("outbox.changed", {"ids": [7, 8], "status": "done"})

    await sync_to_async(burst)()
    received = [await comm.receive_json_from(timeout=5) for _ in range(4)]
    assert received == [
        {"type": "call.changed", "data": {"id": 2, "status": "running"}},
        {"type": "outbox.changed", "data": {"ids": [7, 8], "status": "leased"}},
        {"type": "call.changed", "data": {"id": 1, "status": "succeeded"}},
        {"type": "outbox.changed", "data": {"ids": [7, 8], "status": "done"}},
    ]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


def test_a_batch_of_events_keeps_the_latest_per_object_where_it_happened() -> None:
    from hostapp.core.events import latest_per_object

    batch = latest_per_object(
        [
            ("call.changed", {"id": 0, "status": "running"}),
            ("call.changed", {"id": 1, "status": "running"}),
            ("catalog.changed", {"server": "a"}),
            ("call.changed", {"id": 2, "status": "running"}),
            ("outbox.changed", {"id": 0, "status": "leased"}),  # another kind, the same id
            ("call.changed", {"id": 0, "status": "failed"}),
            ("catalog.changed", {"server": "a"}),  # no id: every one is kept
        ]
    )
    assert batch == [
        ("call.changed", {"id": 1, "status": "running"}),
        ("catalog.changed", {"server": "a"}),
        ("call.changed", {"id": 2, "status": "running"}),
        ("outbox.changed", {"id": 0, "status": "leased"}),
        ("call.changed", {"id": 0, "status": "failed"}),
        ("catalog.changed", {"server": "a"}),
    ]
