"""A server behind OAuth, through the host: needs authorization, Connect, calls, refresh,
revocation, Disconnect. Against the local OAuth-protected MCP server (`tests.oauthserver`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from hostapp.catalog.models import Server, Tool
from hostapp.catalog.pool import close_pool, pool_for, refresh_server, runtime_config
from hostapp.mcp.connection import Connection
from hostapp.mcp.errors import McpFailure
from hostapp.oauth import flows
from hostapp.oauth.models import AuthorizationFlow, Credential
from hostapp.oauth.store import auth_for
from tests.helpers import wait_until
from tests.oauthserver.test_oauthserver import RunningServer, launch, stop, wait_ready

pytestmark = pytest.mark.django_db(transaction=True)

CALLBACK = "http://testserver/oauth/callback/"


@pytest.fixture
def oauth_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    args = getattr(request, "param", ("--auto-approve", "--token-lifetime", "3"))
    proc = launch(*args)
    try:
        yield wait_ready(proc)
    finally:
        stop(proc)


@pytest.fixture(autouse=True)
def fresh_pool() -> Iterator[None]:
    close_pool()
    yield
    close_pool()


@pytest.fixture
def admin(db: None) -> User:
    return User.objects.create_superuser("root", "root@example.com", "root-password-1")


def add_server(oauth_server: RunningServer) -> Server:
    return Server.objects.create(name="notes", transport=Server.HTTP, url=oauth_server.url, trusted=True)


def refresh(server: Server) -> None:
    server.refresh_from_db()
    refresh_server(server)
    server.refresh_from_db()


def consent(flow: AuthorizationFlow) -> dict[str, str]:
    """The person at the authorization server (auto-approving): where the browser lands."""
    response = httpx2.get(flow.authorization_url, follow_redirects=False)
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(CALLBACK), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def connect(server: Server, admin: User) -> AuthorizationFlow:
    flow = flows.start(server, admin.pk, CALLBACK)
    assert flow.status == AuthorizationFlow.WAITING, flow.error
    back = consent(flow)
    received = flows.receive(back["state"], admin.pk, back.get("code", ""), back.get("iss", ""), back.get("error", ""))
    assert received is not None
    return flows.wait_for_end(received)


def call_whoami(server: Server) -> dict[str, Any]:
    result = pool_for(server).call_tool(server.name, "whoami", {}, timeout=20)
    assert not result.get("isError"), result
    return result.get("structuredContent") or result


def test_a_server_that_asks_for_oauth_needs_authorization_until_connected(
    oauth_server: RunningServer, admin: User
) -> None:
    server = add_server(oauth_server)
    refresh(server)
    assert server.stale or not server.tools.exists()
    wait_until(lambda: Server.objects.get(pk=server.pk).state == "needs-authorization", timeout=20, what="state")
    server.refresh_from_db()
    assert server.needs_authorization
    assert "requires authorization" in (server.last_error or {}).get("message", "")

    # The page says so and offers Connect.
    client = Client()
    client.force_login(admin)
    page = client.get("/servers/").content.decode()
    assert "needs-authorization" in page and f"/servers/{server.name}/connect/" in page

    flow = connect(server, admin)
    assert flow.status == AuthorizationFlow.DONE, flow.error
    state = oauth_server.state()
    assert state["clients_registered"] == 1  # dynamic registration
    authorize = state["last_authorize"]
    assert authorize["code_challenge_method"] == "S256"
    assert authorize["resource"] == oauth_server.url
    assert authorize["scope"] == "mcp:read"  # from the protected resource metadata
    assert authorize["redirect_uri"] == CALLBACK

    credential = Credential.objects.get(server=server)
    assert credential.status == Credential.CONNECTED and credential.scope == "mcp:read"
    assert credential.connected_by == admin
    with connection.cursor() as cursor:
        cursor.execute("SELECT tokens, client_info FROM oauth_credential WHERE id = %s", [credential.pk])
        tokens_raw, client_raw = cursor.fetchone()
    assert credential.tokens["access_token"] not in tokens_raw and "access_token" not in tokens_raw
    assert credential.client_id not in client_raw

    # The pool reconnects with the token; the catalog fills; a call goes through.
    refresh(server)
    assert pool_for(server).status(server.name).state == "ready"
    assert set(server.tools.values_list("original_name", flat=True)) == {"whoami", "echo", "write_note"}
    assert server.tools.filter(status=Tool.ACTIVE).count() == 3
    me = call_whoami(server)
    assert me["scopes"] == ["mcp:read"]

    # The page shows the connection, never the token.
    page = client.get(f"/servers/{server.name}/").content.decode()
    assert "connected" in page and "mcp:read" in page
    assert credential.tokens["access_token"] not in page and credential.tokens["refresh_token"] not in page


def test_no_token_or_client_secret_reaches_a_log_line(
    oauth_server: RunningServer, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="hostapp")
    server = add_server(oauth_server)
    refresh(server)
    assert connect(server, admin).status == AuthorizationFlow.DONE
    server.refresh_from_db()
    call_whoami(server)
    time.sleep(3.5)
    call_whoami(server)  # a refresh
    credential = Credential.objects.get(server=server)
    secrets = [credential.tokens["access_token"], credential.tokens["refresh_token"]]
    secrets += [v for v in [(credential.client_info or {}).get("client_secret")] if v]
    assert credential.refreshes >= 1
    for secret in secrets:
        assert secret not in caplog.text


def test_tokens_are_refreshed_before_they_expire_and_a_revoked_grant_needs_authorization_again(
    oauth_server: RunningServer, admin: User
) -> None:
    server = add_server(oauth_server)
    assert connect(server, admin).status == AuthorizationFlow.DONE
    server.refresh_from_db()
    first = call_whoami(server)

    time.sleep(3.5)  # the access token lives 3 s
    again = call_whoami(server)
    credential = Credential.objects.get(server=server)
    assert credential.refreshes >= 1 and credential.refreshed_at is not None
    assert oauth_server.state()["refreshes"] >= 1
    assert again["client_id"] == first["client_id"]

    # The authorization server revokes everything: the refresh fails, the server needs
    # authorization again, visibly, and calls say why.
    httpx2.post(f"{oauth_server.base}/admin/revoke-all").raise_for_status()
    with pytest.raises(McpFailure) as failed:
        pool_for(server).call_tool(server.name, "whoami", {}, timeout=20)
    assert failed.value.reason == "needs_authorization", failed.value
    credential.refresh_from_db()
    assert credential.status == Credential.NEEDS_AUTHORIZATION
    assert credential.reason
    server.refresh_from_db()
    assert server.needs_authorization

    # Connect again: back to work.
    assert connect(server, admin).status == AuthorizationFlow.DONE
    server.refresh_from_db()
    assert call_whoami(server)["scopes"] == ["mcp:read"]


def test_a_step_up_challenge_asks_for_the_scope_on_the_next_connect(oauth_server: RunningServer, admin: User) -> None:
    server = add_server(oauth_server)
    assert connect(server, admin).status == AuthorizationFlow.DONE
    server.refresh_from_db()

    with pytest.raises(McpFailure) as failed:
        pool_for(server).call_tool(server.name, "write_note", {"text": "hi"}, timeout=20)
    assert failed.value.reason == "needs_authorization"
    credential = Credential.objects.get(server=server)
    assert credential.status == Credential.NEEDS_AUTHORIZATION
    assert "mcp:write" in credential.required_scope and "more permissions" in credential.reason

    assert connect(server, admin).status == AuthorizationFlow.DONE
    assert set(oauth_server.state()["last_authorize"]["scope"].split()) == {"mcp:read", "mcp:write"}
    credential.refresh_from_db()
    assert set(credential.scope.split()) == {"mcp:read", "mcp:write"} and credential.required_scope == ""
    server.refresh_from_db()
    result = pool_for(server).call_tool(server.name, "write_note", {"text": "hi"}, timeout=20)
    assert not result.get("isError"), result


def test_disconnect_revokes_and_forgets(oauth_server: RunningServer, admin: User) -> None:
    server = add_server(oauth_server)
    assert connect(server, admin).status == AuthorizationFlow.DONE
    assert oauth_server.state()["active_access_tokens"] == 1

    client = Client()
    client.force_login(admin)
    response = client.post(f"/servers/{server.name}/disconnect/", follow=True)
    assert "revoked and forgotten" in response.content.decode()
    state = oauth_server.state()
    assert state["active_access_tokens"] == 0 and state["active_refresh_tokens"] == 0
    credential = Credential.objects.get(server=server)
    assert credential.tokens is None and credential.client_info is None and credential.status == Credential.NONE


@pytest.mark.parametrize("oauth_server", [("--token-lifetime", "60")], indirect=True)
def test_a_refused_consent_is_reported_and_changes_nothing(oauth_server: RunningServer, admin: User) -> None:
    server = add_server(oauth_server)
    flow = flows.start(server, admin.pk, CALLBACK)
    assert flow.status == AuthorizationFlow.WAITING
    with httpx2.Client(follow_redirects=False) as http:
        page = http.get(flow.authorization_url, follow_redirects=True)
        assert "Approve" in page.text
        txn = parse_qs(urlsplit(str(page.url)).query)["txn"][0]
        denied = http.post(str(page.url.join("/consent")), data={"txn": txn, "action": "deny"})
    back = {k: v[0] for k, v in parse_qs(urlsplit(denied.headers["location"]).query).items()}
    assert back["error"] == "access_denied"

    # Someone else's browser cannot complete it.
    other = User.objects.create_user("eve", "eve@example.com", "eve-password-1")
    assert flows.receive(back["state"], other.pk, "", "", back["error"]) is None

    received = flows.receive(back["state"], admin.pk, "", back.get("iss", ""), back["error"])
    assert received is not None
    ended = flows.wait_for_end(received)
    assert ended.status == AuthorizationFlow.FAILED and "access_denied" in ended.error
    assert not Credential.objects.filter(server=server, tokens__isnull=False).exists()


def test_the_callback_refuses_an_unknown_state(admin: User) -> None:
    client = Client()
    client.force_login(admin)
    response = client.get("/oauth/callback/?state=nope&code=x")
    assert response.status_code == 400
    assert "unknown" in response.content.decode()


def test_two_processes_share_one_grant_when_the_refresh_token_rotates(oauth_server: RunningServer, admin: User) -> None:
    """Web and worker each hold a connection; the authorization server rotates refresh tokens.
    The one that refreshes second finds its refresh token spent and takes the stored tokens."""
    server = add_server(oauth_server)
    assert connect(server, admin).status == AuthorizationFlow.DONE
    server.refresh_from_db()
    config = runtime_config(server)

    async def both() -> list[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            first = Connection(config, auth=auth_for(config))
            second = Connection(config, auth=auth_for(config))
            await first.open(stack)
            await second.open(stack)
            await asyncio.sleep(3.5)  # both tokens expire
            results = [await first.call_tool("whoami", {}), await second.call_tool("whoami", {})]
            return results

    results = asyncio.run(both())
    assert all(not r.get("isError") for r in results), results
    credential = Credential.objects.get(server=server)
    assert credential.status == Credential.CONNECTED
    assert oauth_server.state()["refreshes"] == 1  # one refresh served both
