"""The pool's OAuth store (hostapp/oauth/store.py): what a new connection reads, and when
it need not read at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hostapp.catalog.models import Server
from hostapp.catalog.pool import runtime_config
from hostapp.oauth import store as store_module
from hostapp.oauth.models import Credential
from hostapp.oauth.store import DatabaseStore

pytestmark = pytest.mark.django_db(transaction=True)

CALLBACK = "http://testserver/oauth/callback/"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store's database round trips, by the function each ran."""
    seen: list[str] = []
    real = store_module._db

    async def counted(fn: Any) -> Any:
        seen.append(fn.__name__)
        return await real(fn)

    monkeypatch.setattr(store_module, "_db", counted)
    return seen


def _server(**fields: Any) -> Server:
    return Server.objects.create(name="notes", transport=Server.HTTP, url="http://127.0.0.1:9/mcp", **fields)


def test_a_connection_to_a_server_with_nothing_stored_starts_without_reading(reads: list[str]) -> None:
    config = runtime_config(_server())
    assert config.credentials_stored is False
    store = DatabaseStore(config.name, redirect_uri=CALLBACK, config=config)
    assert asyncio.run(store.load()) == (None, None, {})
    assert reads == []

    # What the connection stores afterwards (a challenge's metadata, say) is read back.
    Credential.objects.create(server=Server.objects.get(name="notes"), learned={"auth_server_url": "https://as"})
    assert asyncio.run(store.load())[2] == {"auth_server_url": "https://as"}
    assert reads == ["read"]


def test_a_pre_registered_client_comes_from_the_configuration(reads: list[str]) -> None:
    config = runtime_config(_server(oauth_client_id="patchbay-app", oauth_client_secret="s3cret"))
    tokens, info, state = asyncio.run(DatabaseStore(config.name, redirect_uri=CALLBACK, config=config).load())
    assert reads == []
    assert tokens is None and state == {}
    assert info is not None
    assert (info.client_id, info.client_secret, info.token_endpoint_auth_method) == (
        "patchbay-app",
        "s3cret",
        "client_secret_post",
    )
    # The same as a store that reads.
    assert asyncio.run(DatabaseStore(config.name, redirect_uri=CALLBACK).load())[1] == info


def test_a_server_with_stored_credentials_is_read_on_every_new_connection(reads: list[str]) -> None:
    server = _server()
    Credential.objects.create(
        server=server,
        stamp="a1b2",
        tokens={"access_token": "tok", "token_type": "Bearer"},
        status=Credential.CONNECTED,
    )
    config = runtime_config(Server.objects.get(pk=server.pk))
    assert config.credentials_stored is True and config.auth_stamp == "a1b2"
    tokens, _, _ = asyncio.run(DatabaseStore(config.name, redirect_uri=CALLBACK, config=config).load())
    assert tokens is not None and tokens.access_token == "tok"
    assert reads == ["read"]
