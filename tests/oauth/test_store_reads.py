"""The credential reads: one per HTTP connection, on one thread that keeps its session."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from hostapp.catalog.models import Server
from hostapp.oauth import store
from hostapp.oauth.models import Credential

pytestmark = pytest.mark.django_db(transaction=True)  # the reader thread sees committed rows only


def vault(server_fields: dict[str, Any] | None = None, **credential: Any) -> Server:
    server = Server.objects.create(
        name="vault", transport=Server.HTTP, url="https://vault.example/mcp", **(server_fields or {})
    )
    if credential:
        Credential.objects.create(server=server, **credential)
    return server


def load(interactive: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    reader = store.DatabaseStore("vault", redirect_uri=store.default_redirect_uri(), interactive=interactive)
    return asyncio.run(reader.load())


def on_reader(fn: Any) -> Any:
    async def go() -> Any:
        return await store._read(fn)

    return asyncio.run(go())


def test_many_reads_open_one_database_session() -> None:
    vault(tokens={"access_token": "at-1", "token_type": "Bearer"}, learned={"scope": "read"})
    store.reader.stop()
    opened: list[object] = []

    def count(sender: Any, connection: Any, **kwargs: Any) -> None:
        opened.append(connection)

    connection_created.connect(count)
    try:
        results = [load() for _ in range(20)]
    finally:
        connection_created.disconnect(count)

    assert len(opened) == 1
    tokens, _info, state = results[-1]
    assert tokens is not None and tokens.access_token == "at-1"
    assert state == {"scope": "read"}


def test_the_reader_closes_its_session_when_idle() -> None:
    vault()
    store.reader.stop()

    def has_session() -> bool:
        had = connection.connection is not None
        Server.objects.get(name="vault")
        return had

    assert on_reader(has_session) is False
    assert on_reader(has_session) is True
    time.sleep(store.READ_IDLE_CLOSE + 0.5)
    assert on_reader(has_session) is False


def test_a_read_that_fails_reaches_its_caller_and_the_reader_goes_on() -> None:
    with pytest.raises(Server.DoesNotExist):
        load()
    vault()
    assert load()[0] is None


def test_a_session_the_database_dropped_is_replaced_and_the_read_answered() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a SQLite session is a file handle: the database cannot drop it")
    vault(tokens={"access_token": "at-2", "token_type": "Bearer"})
    store.reader.stop()
    backend = on_reader(lambda: connection.cursor().execute("SELECT pg_backend_pid()").fetchone()[0])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
        assert cursor.fetchone()[0] is True

    tokens, _info, _state = load()

    assert tokens is not None and tokens.access_token == "at-2"


def test_a_load_reads_the_tokens_registration_and_state_of_the_credential() -> None:
    registered = {"client_id": "dyn-1", "redirect_uris": [store.default_redirect_uri()], "client_secret": "s-1"}
    vault(
        tokens={"access_token": "at-3", "token_type": "Bearer", "refresh_token": "rt-3"},
        client_info=registered,
        learned={"scope": "read write"},
    )

    tokens, info, state = load()
    assert (tokens.access_token, tokens.refresh_token) == ("at-3", "rt-3")
    assert (info.client_id, info.client_secret) == ("dyn-1", "s-1")
    assert state == {"scope": "read write"}
    # The Connect flow's store starts from no token: a new consent is the point.
    assert load(interactive=True)[0] is None


def test_a_pre_registered_client_wins_over_a_registration_and_has_its_secret_read_whole() -> None:
    vault(
        {"oauth_client_id": "patchbay", "oauth_client_secret": "sk-0123456789abcdef"},
        client_info={"client_id": "dyn-2", "redirect_uris": [store.default_redirect_uri()]},
    )

    _tokens, info, state = load()

    assert (info.client_id, info.client_secret) == ("patchbay", "sk-0123456789abcdef")
    assert info.token_endpoint_auth_method == "client_secret_post"
    assert state == {}


def test_a_server_without_a_credential_loads_nothing() -> None:
    vault()
    assert load() == (None, None, {})
