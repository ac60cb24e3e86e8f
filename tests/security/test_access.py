"""Who may reach what: every route refuses strangers, CSRF guards every session write, the
live socket refuses strangers and other origins, and an agent token never decides an
approval, answers a request for input or touches the outbox.

The route tests walk `get_resolver()`, so a route added later is covered without being
listed here; only the few public ones are named, each with its reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from hostapp.asgi import application
from hostapp.calls.models import Call
from hostapp.catalog.models import Server

from .conftest import client_for
from .host import SecureHost

# Routes anyone may reach, and why.
PUBLIC = {
    "login": "the login page",
    "admin:login": "the admin's login page",
    "healthz": "liveness probe for the orchestrator; says only 'ok'",
    "readyz": "readiness probe; names failing dependencies, never their addresses",
    "oauth_client_metadata": "the host's OAuth client metadata document, read by authorization servers; "
    "public by design, names no secret (404 unless the host is public over HTTPS)",
}
# Answers 404 to everyone (the API's docs page is turned off), so there is nothing to guard.
NOT_FOUND_FOR_ALL = {"api:api-root"}


def named_routes() -> Iterator[tuple[str, URLPattern]]:
    def walk(patterns: list[Any], namespace: str | None) -> Iterator[tuple[str, URLPattern]]:
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = namespace
                if p.namespace:
                    ns = f"{namespace}:{p.namespace}" if namespace else p.namespace
                yield from walk(p.url_patterns, ns)
            elif p.name:
                yield (f"{namespace}:{p.name}" if namespace else p.name), p

    yield from walk(get_resolver().url_patterns, None)


def route_url(name: str, pattern: URLPattern, sample: dict[str, Any]) -> str:
    return reverse(name, kwargs={key: sample[key] for key in pattern.pattern.regex.groupindex})


@pytest.fixture
def sample(vault: Server, waiting_call: Call, agent_token: tuple[Any, str]) -> dict[str, Any]:
    """A value for every URL argument, naming real rows where there are any."""
    return {
        "name": vault.name,
        "exposed_name": "vault__peek",
        "call_id": waiting_call.pk,
        "input_id": 1,
        "action_id": 1,
        "object_id": "1",
        "content_type_id": "1",
        "id": "1",
        "app_label": "catalog",
        "url": "anything",
    }


def _is_api(name: str) -> bool:
    return name.startswith("api:")


def _api_call(client: Client, url: str) -> Any:
    """The route's own method: GET, or POST with a JSON body when GET is not allowed."""
    response = client.get(url)
    if response.status_code == 405:
        response = client.post(url, "{}", content_type="application/json")
    return response


def _assert_waiting(call: Call) -> None:
    call.refresh_from_db()
    assert call.status == Call.WAITING
    assert call.decided_by is None
    assert not call.events.filter(kind__in=["approved", "denied"]).exists()


# --- anonymous ------------------------------------------------------------------------------


def test_the_walk_finds_every_kind_of_route() -> None:
    names = {name for name, _ in named_routes()}
    for expected in ("home", "servers", "call_approve", "agents", "metrics", "api:approve_call", "admin:index"):
        assert expected in names
    assert set(PUBLIC) | NOT_FOUND_FOR_ALL <= names


def test_every_page_sends_an_anonymous_visitor_to_log_in(sample: dict[str, Any]) -> None:
    client = Client()
    login_pages = (reverse("login"), reverse("admin:login"))
    checked = []
    for name, pattern in named_routes():
        if name in PUBLIC or name in NOT_FOUND_FOR_ALL or _is_api(name) or name == "metrics":
            continue
        url = route_url(name, pattern, sample)
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            location = response.get("Location", "")
            assert response.status_code == 302, (name, method, response.status_code)
            assert urlsplit(location).path in login_pages, (name, method, location)
            assert "next=" in location, (name, method, location)
        checked.append(name)
    assert len(checked) > 60, checked


def test_every_api_route_and_the_metrics_answer_401_to_an_anonymous_client(sample: dict[str, Any]) -> None:
    client = Client()
    checked = []
    for name, pattern in named_routes():
        if not (_is_api(name) or name == "metrics") or name in NOT_FOUND_FOR_ALL:
            continue
        response = _api_call(client, route_url(name, pattern, sample))
        assert response.status_code == 401, (name, response.status_code, response.content[:200])
        assert response["WWW-Authenticate"].startswith("Bearer")
        checked.append(name)
    assert "api:openapi-json" in checked and "metrics" in checked
    assert len(checked) >= 20, checked  # the 19 API routes of today, and the metrics


def test_a_revoked_or_unknown_token_is_as_good_as_none(sample: dict[str, Any], agent_token: tuple[Any, str]) -> None:
    from hostapp.gateway.tokens import revoke_token

    agent, token = agent_token
    assert Client(headers={"Authorization": f"Bearer {token}"}).get("/api/v1/servers").status_code == 200
    revoke_token(agent.name)
    for value in (token, "pb_" + "x" * 43, "not-a-token", ""):
        client = Client(headers={"Authorization": f"Bearer {value}"})
        assert client.get("/api/v1/servers").status_code == 401, value
        assert client.get("/api/v1/openapi.json").status_code == 401, value


def test_the_api_root_reveals_nothing(sample: dict[str, Any]) -> None:
    response = Client().get("/api/v1/")
    assert response.status_code == 404
    assert b"servers" not in response.content


def test_a_page_never_accepts_an_agent_token_as_a_login(sample: dict[str, Any], agent_token: tuple[Any, str]) -> None:
    client = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
    for url in ("/", "/calls/pending/", "/servers/vault/", "/metrics"):
        response = client.get(url)
        assert response.status_code in (302, 401), url
        if response.status_code == 302:
            assert response["Location"].startswith("/login/"), url


def test_static_files_are_public_but_nothing_beside_them(db: None) -> None:
    client = Client()
    assert client.get("/static/js/live.js").status_code == 200
    for url in ("/static/../secret_key", "/static/%2e%2e/secret_key", "/static/..%2fsecret_key",
                "/static/../patchbay.sqlite3", "/static/../../hostapp/settings.py"):  # fmt: skip
        response = client.get(url)
        assert response.status_code == 404, url


# --- /mcp through the ASGI application ---------------------------------------------------------


async def _mcp(headers: dict[str, str], method: str = "POST") -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        if method == "POST":
            return await client.post(
                "/mcp", json=body, headers={"Accept": "application/json, text/event-stream", **headers}
            )
        return await client.get("/mcp", headers=headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_the_mcp_endpoint_wants_a_valid_token(anyio_backend: str) -> None:
    from hostapp.gateway.tokens import create_token, revoke_token

    agent, token = await sync_to_async(create_token)("deploy-bot")
    await sync_to_async(revoke_token)(agent.name)
    for headers in ({}, {"Authorization": "Bearer pb_unknown"}, {"Authorization": f"Bearer {token}"},
                    {"Authorization": f"Basic {token}"}):  # fmt: skip
        for method in ("POST", "GET"):
            response = await _mcp(headers, method)
            assert response.status_code == 401, (headers, method)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "tools" not in response.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_the_mcp_endpoint_refuses_a_foreign_origin_even_with_a_valid_token(anyio_backend: str) -> None:
    from hostapp.gateway.tokens import create_token

    _, token = await sync_to_async(create_token)("deploy-bot")
    for origin in ("http://evil.example", "https://127.0.0.1.evil.example", "null"):
        response = await _mcp({"Authorization": f"Bearer {token}", "Origin": origin})
        assert response.status_code == 403, origin
        assert "tools" not in response.text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.slow
def test_over_mcp_an_agent_reads_the_status_of_its_own_calls_only(host: SecureHost) -> None:
    admin = host.login("admin")
    theirs = admin.post(
        "/api/v1/calls",
        json={"tool": "hostile__render", "arguments": {"text": "a person's call"}},
        headers={"X-CSRFToken": admin.cookies["csrftoken"]},
    )
    admin.close()
    assert theirs.status_code == 201, theirs.text
    with host.agent_client() as agent:
        mine = agent.post("/api/v1/calls", json={"tool": "hostile__render", "arguments": {"text": "mine"}}).json()
        assert agent.get(f"/api/v1/calls/{theirs.json()['call_id']}").status_code == 404

    refused = host.call_over_mcp("patchbay__call_status", {"call_id": theirs.json()["call_id"]})
    assert refused.is_error
    assert refused.content[0].text == f"You have no call #{theirs.json()['call_id']}."
    own = host.call_over_mcp("patchbay__call_status", {"call_id": mine["call_id"]})
    assert not own.is_error
    assert json.loads(own.content[0].text)["status"] == "succeeded"


# --- CSRF -------------------------------------------------------------------------------------------


def _csrf_client(user: User) -> tuple[Client, str]:
    """A logged-in client that enforces CSRF, and the CSRF token a page gave it."""
    client = client_for(user, enforce_csrf_checks=True)
    assert client.get("/calls/pending/").status_code == 200
    return client, client.cookies["csrftoken"].value


def test_every_page_refuses_a_post_without_the_csrf_token(sample: dict[str, Any], admin_user: User) -> None:
    client, _ = _csrf_client(admin_user)
    checked = []
    for name, pattern in named_routes():
        if _is_api(name):
            continue
        url = route_url(name, pattern, sample)
        response = client.post(url, {"reason": "csrf", "ids": "1", "enabled": "0"})
        assert response.status_code == 403, (name, response.status_code)
        checked.append(name)
    assert len(checked) > 65, checked
    _assert_waiting(Call.objects.get(pk=sample["call_id"]))
    assert Server.objects.filter(name="vault", enabled=True).exists()


def test_a_page_post_with_the_csrf_token_goes_through(sample: dict[str, Any], approver: User) -> None:
    client, token = _csrf_client(approver)
    response = client.post(f"/calls/{sample['call_id']}/deny/", {"reason": "not today"}, headers={"X-CSRFToken": token})
    assert response.status_code == 302
    assert Call.objects.get(pk=sample["call_id"]).status == Call.DENIED


def test_every_api_write_with_a_session_needs_the_csrf_token(sample: dict[str, Any], admin_user: User) -> None:
    client, _ = _csrf_client(admin_user)
    bodies = {"api:deny_call": {"reason": "csrf"}, "api:discard_action": {"reason": "csrf"},
              "api:make_call": {"tool": "vault__peek"}, "api:answer_input": {"action": "decline"}}  # fmt: skip
    checked = []
    for name, pattern in named_routes():
        if not _is_api(name) or name in NOT_FOUND_FOR_ALL:
            continue
        url = route_url(name, pattern, sample)
        if client.get(url).status_code != 405 and name != "api:make_call":
            continue  # a read; the same URL may also take a POST (make_call shares /calls)
        response = client.post(url, bodies.get(name, {}), content_type="application/json")
        assert response.status_code == 403, (name, response.status_code, response.content[:200])
        assert "CSRF" in response.json()["error"]
        checked.append(name)
    assert sorted(checked) == sorted(
        ["api:refresh_server", "api:make_call", "api:approve_call", "api:deny_call",
         "api:redrive_action", "api:discard_action", "api:resolve_action", "api:answer_input"]
    )  # fmt: skip
    assert not Call.objects.exclude(pk=sample["call_id"]).exists()
    _assert_waiting(Call.objects.get(pk=sample["call_id"]))


def test_an_api_write_with_a_session_and_the_csrf_token_goes_through(sample: dict[str, Any], approver: User) -> None:
    client, token = _csrf_client(approver)
    response = client.post(
        f"/api/v1/approvals/{sample['call_id']}/deny", {"reason": "no"}, content_type="application/json",
        headers={"X-CSRFToken": token},
    )  # fmt: skip
    assert response.status_code == 200, response.content
    assert response.json()["status"] == Call.DENIED


# --- an agent is never an approver ---------------------------------------------------------------------

AGENT_FORBIDDEN = [
    ("get", "/api/v1/approvals", None),
    ("post", "/api/v1/approvals/{call}/approve", {"always": True}),
    ("post", "/api/v1/approvals/{call}/deny", {"reason": "an agent says no"}),
    ("get", "/api/v1/outbox", None),
    ("post", "/api/v1/outbox/1/redrive", {}),
    ("post", "/api/v1/outbox/1/discard", {"reason": "an agent discards"}),
    ("post", "/api/v1/outbox/1/resolve", {}),
    ("post", "/api/v1/servers/vault/refresh", {}),
    ("get", "/api/v1/inputs", None),
    ("post", "/api/v1/inputs/1/answer", {"action": "decline"}),
]


@pytest.mark.parametrize(("method", "path", "body"), AGENT_FORBIDDEN)
def test_an_agent_token_cannot_decide_approvals_answer_inputs_or_touch_the_outbox(
    method: str, path: str, body: dict[str, Any] | None, waiting_call: Call, agent_token: tuple[Any, str]
) -> None:
    client = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
    url = path.format(call=waiting_call.pk)
    response = client.get(url) if method == "get" else client.post(url, body, content_type="application/json")
    assert response.status_code == 403, response.content
    assert response.json() == {"error": "agent tokens cannot do this; a person must"}
    _assert_waiting(waiting_call)


def test_an_agent_token_even_of_a_superusers_making_is_not_that_person(waiting_call: Call, admin_user: User) -> None:
    from hostapp.gateway.tokens import create_token

    _, token = create_token("alices-bot", user=admin_user)
    client = Client(headers={"Authorization": f"Bearer {token}"})
    response = client.post(f"/api/v1/approvals/{waiting_call.pk}/approve", {}, content_type="application/json")
    assert response.status_code == 403
    _assert_waiting(waiting_call)


def test_an_agent_token_with_a_strangers_session_cookie_is_still_refused(
    waiting_call: Call, agent_token: tuple[Any, str]
) -> None:
    """A forged or stale session cookie must not turn the request into a person's."""
    client = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
    client.cookies["sessionid"] = "forged-session-key"
    response = client.post(f"/api/v1/approvals/{waiting_call.pk}/approve", {}, content_type="application/json")
    assert response.status_code == 403
    _assert_waiting(waiting_call)


def test_an_agent_sees_only_its_own_calls(waiting_call: Call, agent_token: tuple[Any, str]) -> None:
    from hostapp.calls.actions import Requester, start_call
    from hostapp.gateway.tokens import create_token

    other, other_token = create_token("other-bot")
    theirs = start_call("vault__wipe", {"disk": "sda"}, Requester(Call.CLI, "cli"))
    client = Client(headers={"Authorization": f"Bearer {other_token}"})
    assert client.get("/api/v1/calls").json() == []
    for call in (waiting_call, theirs):
        assert client.get(f"/api/v1/calls/{call.pk}").status_code == 404


def test_an_approver_session_can_decide_where_the_agent_could_not(waiting_call: Call, approver: User) -> None:
    """The control for the tests above: the 403 is about who asks, not about the call."""
    client, token = _csrf_client(approver)
    response = client.post(
        f"/api/v1/approvals/{waiting_call.pk}/deny", {"reason": "checked"}, content_type="application/json",
        headers={"X-CSRFToken": token},
    )  # fmt: skip
    assert response.status_code == 200
    waiting_call.refresh_from_db()
    assert waiting_call.status == Call.DENIED and waiting_call.decided_by == approver


def test_a_person_without_the_permission_cannot_decide_either(waiting_call: Call, plain_user: User) -> None:
    client, token = _csrf_client(plain_user)
    response = client.post(
        f"/api/v1/approvals/{waiting_call.pk}/approve", {}, content_type="application/json",
        headers={"X-CSRFToken": token},
    )  # fmt: skip
    assert response.status_code == 403
    assert client.post(f"/calls/{waiting_call.pk}/approve/", headers={"X-CSRFToken": token}).status_code == 403
    _assert_waiting(waiting_call)


OFF_SITE = ["https://evil.example/phish", "//evil.example/phish", "/\\evil.example/phish",
            "javascript:alert(1)", "https:evil.example"]  # fmt: skip
# Every route that redirects to a posted `next`, with the fields it needs.
NEXT_TAKERS = [
    ("call_deny", {"reason": "no"}),
    ("call_approve", {}),
    ("server_refresh", {}),
    ("server_enable", {"enabled": "1"}),
    ("outbox_redrive", {"ids": "1"}),
    ("outbox_discard", {"ids": "1", "reason": "no"}),
    ("outbox_mark_done", {}),
]


@pytest.mark.parametrize(("route", "fields"), NEXT_TAKERS)
def test_a_posted_next_never_redirects_off_site(
    route: str, fields: dict[str, str], sample: dict[str, Any], admin_user: User
) -> None:
    client = client_for(admin_user)
    pattern = dict(named_routes())[route]
    url = route_url(route, pattern, sample)
    for target in OFF_SITE:
        response = client.post(url, {**fields, "next": target})
        assert response.status_code == 302, (route, target, response.status_code)
        location = urlsplit(response["Location"])
        assert location.netloc in ("", "testserver") and location.scheme in ("", "http"), (route, target, location)
        assert not response["Location"].startswith(("//", "/\\")), (route, target, response["Location"])
    # The control: a same-site `next` is followed.
    assert client.post(url, {**fields, "next": "/calls/"})["Location"] == "/calls/"


# --- the live websocket ----------------------------------------------------------------------------------


def _session_cookie(user: User) -> str:
    return f"sessionid={client_for(user).cookies['sessionid'].value}"


async def _socket(
    cookie: str | None, origin: str | None = "http://127.0.0.1:8000", **extra: str
) -> WebsocketCommunicator:
    headers = [(b"host", b"127.0.0.1:8000")]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    return WebsocketCommunicator(application, "/ws/live/", headers=headers)


async def _refused(comm: WebsocketCommunicator) -> bool:
    connected, _ = await comm.connect()
    # Refused or not, the socket is closed the way a server closes it (`websocket.disconnect`)
    # and the consumer is awaited to its end: a consumer left running is cancelled when the
    # test's event loop closes, which can wait on the channel layer's Redis for long.
    await comm.disconnect()
    return not connected


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
class TestLiveSocket:
    async def test_it_refuses_an_anonymous_socket(self, anyio_backend: str) -> None:
        assert await _refused(await _socket(None))

    async def test_it_refuses_an_agent_token_in_place_of_a_session(
        self, anyio_backend: str, agent_token: tuple[Any, str]
    ) -> None:
        assert await _refused(await _socket(None, authorization=f"Bearer {agent_token[1]}"))

    async def test_it_refuses_another_origin_and_a_missing_one(self, anyio_backend: str, approver: User) -> None:
        cookie = await sync_to_async(_session_cookie)(approver)
        for origin in ("http://evil.example", "https://127.0.0.1.evil.example", "null", None):
            assert await _refused(await _socket(cookie, origin=origin)), origin
        comm = await _socket(cookie)
        connected, _ = await comm.connect()
        assert connected  # the control: same cookie, our origin
        await comm.disconnect()

    async def test_it_lets_only_an_approver_decide(
        self, anyio_backend: str, waiting_call: Call, approver: User, plain_user: User
    ) -> None:
        outsider = await _socket(await sync_to_async(_session_cookie)(plain_user))
        assert (await outsider.connect())[0]
        await outsider.send_json_to({"action": "approve", "call_id": waiting_call.pk, "always": True})
        reply = await _reply(outsider)
        assert reply == {"type": "error", "data": {"message": "you do not have the approve permission"}}
        await outsider.disconnect()
        await sync_to_async(_assert_waiting)(waiting_call)

        comm = await _socket(await sync_to_async(_session_cookie)(approver))
        assert (await comm.connect())[0]
        await comm.send_json_to({"action": "deny", "call_id": waiting_call.pk, "reason": "checked"})
        reply = await _reply(comm)
        assert reply == {"type": "decided", "data": {"call_id": waiting_call.pk, "status": Call.DENIED}}
        await comm.disconnect()


async def _reply(comm: WebsocketCommunicator) -> dict[str, Any]:
    """The answer to a command (live events may arrive first)."""
    while True:
        message = await comm.receive_json_from(timeout=5)
        if message["type"] in ("error", "decided"):
            return message
