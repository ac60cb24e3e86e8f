"""No secret leaves: a server's environment and header values, agent tokens, SECRET_KEY and
the metrics token appear in no page, API response, export, CLI listing or log line.

In-process, every route is rendered as the administrator (who sees the most) after the
host has used the secrets and failed with them, with every logger at DEBUG; then a real
`manage.py run` with JSON logs serves pages, API calls and /mcp calls that make it send the
secrets to the hostile server, and everything it printed is scanned.
"""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from hostapp.calls.models import Call
from hostapp.catalog.models import SECRET_MASK, Server
from hostapp.core.logs import JsonFormatter
from tests.helpers import wait_until

from .conftest import ENV_SECRET, HEADER_SECRET, HEADER_VALUE, client_for
from .host import SecureHost
from .test_access import named_routes, route_url

METRICS_TOKEN = "metrics-SECRET-0123456789abcdef"


def assert_no_secret(text: str, secrets: dict[str, str], where: str) -> None:
    for label, secret in secrets.items():
        assert secret not in text, f"{label} leaks in {where}: …{_around(text, secret)}…"


def _around(text: str, secret: str) -> str:
    at = text.find(secret)
    return text[max(0, at - 120) : at + len(secret) + 40]


@pytest.fixture
def secrets_in_play(settings: Any, vault: Server, agent_token: tuple[Any, str]) -> dict[str, str]:
    settings.PATCHBAY_METRICS_TOKEN = METRICS_TOKEN
    return {
        "server env value": ENV_SECRET,
        "server header value": HEADER_SECRET,
        "agent token": agent_token[1],
        "SECRET_KEY": settings.SECRET_KEY,
        "metrics token": METRICS_TOKEN,
    }


def _use_the_secrets(vault: Server, agent_token: tuple[Any, str], approver: User) -> Call:
    """What makes the host handle the secrets: a refresh and a call that start the server
    with its environment and fail, an agent's call through the API, an approval."""
    from hostapp.catalog.pool import close_pool, refresh_server

    try:
        result = refresh_server(vault)
        assert not result.ok  # /bin/true is no MCP server: the failure path, with its messages
        agent = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
        response = agent.post("/api/v1/calls", {"tool": "vault__peek"}, content_type="application/json")
        assert response.status_code == 201, response.content
        waiting = agent.post(
            "/api/v1/calls", {"tool": "vault__wipe", "arguments": {"disk": "sdb"}}, content_type="application/json"
        ).json()
        assert waiting["status"] == Call.WAITING
        approved = client_for(approver).post(f"/calls/{waiting['call_id']}/approve/")
        assert approved.status_code == 302
    finally:
        close_pool()
    vault.refresh_from_db()
    assert vault.refresh_error or vault.last_error, "the failure was recorded"
    return Call.objects.get(pk=waiting["call_id"])


def _admin_sample(vault: Server, call: Call, agent_token: tuple[Any, str], admin: User) -> dict[str, Any]:
    return {
        "name": vault.name,
        "exposed_name": "vault__peek",
        "call_id": call.pk,
        "action_id": getattr(getattr(call, "action", None), "pk", 1),
        "input_id": 1,
        "content_type_id": "1",
        "id": str(admin.pk),
        "app_label": "catalog",
        "url": "anything",
    }


def _object_id(route: str, vault: Server, call: Call, agent: Any, admin: User) -> str:
    for label, pk in (("catalog_server", vault.pk), ("catalog_tool", vault.tools.order_by("pk")[0].pk),
                      ("calls_call", call.pk), ("gateway_agenttoken", agent.pk), ("auth_user", admin.pk)):  # fmt: skip
        if label in route:
            return str(pk)
    return "1"


@pytest.mark.django_db(transaction=True)
def test_no_page_api_response_or_log_line_shows_a_secret(
    caplog: pytest.LogCaptureFixture,
    secrets_in_play: dict[str, str],
    vault: Server,
    agent_token: tuple[Any, str],
    approver: User,
    admin_user: User,
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django")
    call = _use_the_secrets(vault, agent_token, approver)

    admin = client_for(admin_user)
    sample = _admin_sample(vault, call, agent_token, admin_user)
    rendered = []
    for name, pattern in named_routes():
        sample["object_id"] = _object_id(name, vault, call, agent_token[0], admin_user)
        url = route_url(name, pattern, sample)
        response = admin.get(url)
        # /readyz answers 503 here: no worker has sent a heartbeat.
        assert response.status_code < 500 or name == "readyz", (name, response.status_code)
        assert_no_secret(response.content.decode(errors="replace"), secrets_in_play, f"GET {url}")
        rendered.append((url, response.status_code))
    # The pages that matter most rendered in full, not as a redirect or a 404.
    ok = {url for url, status in rendered if status == 200}
    for url in ("/servers/", "/servers/vault/", f"/admin/catalog/server/{vault.pk}/change/", "/admin/catalog/server/",
                "/catalog/", "/catalog/vault__peek/", "/calls/", f"/calls/{call.pk}/", "/agents/", "/metrics",
                "/api/v1/servers", "/api/v1/servers/vault", "/api/v1/tools", "/api/v1/calls",
                f"/api/v1/calls/{call.pk}", "/api/v1/openapi.json"):  # fmt: skip
        assert url in ok, (url, [r for r in rendered if r[0] == url])

    # The fragments the live pages fetch, and the agent's own view of the API.
    extra = ["/?fragment=1", "/servers/?fragment=1", "/catalog/?fragment=1", "/calls/?fragment=1",
             "/calls/pending/?fragment=1", f"/calls/{call.pk}/?fragment=1", "/outbox/?fragment=1",
             f"/calls/{call.pk}/result.json"]  # fmt: skip
    for url in extra:
        assert_no_secret(admin.get(url).content.decode(), secrets_in_play, f"GET {url}")
    agent = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
    for url in ("/api/v1/servers", "/api/v1/servers/vault", "/api/v1/tools", "/api/v1/tools/vault__peek",
                "/api/v1/calls", "/api/v1/openapi.json"):  # fmt: skip
        response = agent.get(url)
        assert response.status_code == 200, url
        assert_no_secret(response.content.decode(), secrets_in_play, f"GET {url} (agent)")
    metrics = Client(headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).get("/metrics")
    assert metrics.status_code == 200
    assert_no_secret(metrics.content.decode(), secrets_in_play, "/metrics (token)")

    assert caplog.records, "the flows above log"
    assert_no_secret(caplog.text, secrets_in_play, "the log")
    as_json = "\n".join(JsonFormatter().format(record) for record in caplog.records)
    assert_no_secret(as_json, secrets_in_play, "the JSON log")


def test_the_server_forms_show_secrets_masked_even_when_sent_back_with_an_error(
    secrets_in_play: dict[str, str], vault: Server, admin_user: User
) -> None:
    admin = client_for(admin_user)
    page = admin.get("/servers/vault/").content.decode()
    assert f"API_TOKEN={SECRET_MASK}" in page and f"Authorization: {SECRET_MASK}" in page
    invalid = {"name": "vault", "transport": "stdio", "command": "", "env": f"API_TOKEN={SECRET_MASK}"}
    response = admin.post("/servers/vault/", invalid)
    assert response.status_code == 200 and "has-error" in response.content.decode()
    assert_no_secret(response.content.decode(), secrets_in_play, "the server form sent back")
    response = admin.post(f"/admin/catalog/server/{vault.pk}/change/", {"name": "vault", "transport": "stdio"})
    assert response.status_code == 200
    assert_no_secret(response.content.decode(), secrets_in_play, "the admin form sent back")
    vault.refresh_from_db()
    assert vault.env == {"API_TOKEN": ENV_SECRET} and vault.headers == {"Authorization": HEADER_VALUE}


def _mcp(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp", *args, stdout=out, stderr=out)
    return out.getvalue()


def test_the_command_line_masks_secrets_unless_asked(secrets_in_play: dict[str, str], vault: Server) -> None:
    exported = _mcp("export")
    assert json.loads(exported)["mcpServers"]["vault"]["env"] == {"API_TOKEN": SECRET_MASK}
    assert_no_secret(exported, secrets_in_play, "mcp export")
    for args in (("servers", "--json"), ("servers",), ("tools", "--json"), ("token", "list", "--json"),
                 ("calls", "--json")):  # fmt: skip
        assert_no_secret(_mcp(*args), secrets_in_play, f"mcp {' '.join(args)}")
    # The control: asked for them, the export has them (so the scan above can see them).
    assert ENV_SECRET in _mcp("export", "--include-secrets")


# --- a real host ----------------------------------------------------------------------------------


def _scan(host: SecureHost) -> dict[str, str]:
    return {
        "server env value": ENV_SECRET,
        "server header value": HEADER_SECRET,
        "agent token": host.token,
        "SECRET_KEY": host.secrets["SECRET_KEY"],
        "metrics token": host.secrets["METRICS_TOKEN"],
    }


def _refreshes(host: SecureHost) -> int:
    """Refresh tasks the worker finished, by its log."""
    return len(re.findall(r"refresh_server\[[^\]]+\] succeeded", host.output))


@pytest.mark.slow
def test_a_running_host_with_json_logs_never_prints_a_secret(host: SecureHost) -> None:
    secrets = _scan(host)
    before = len(host.received())
    admin = host.login("admin")
    agent = host.agent_client()

    # Use every secret: a call over stdio (env) from the API, one over HTTP (header) from /mcp,
    # and a refresh the worker makes after a person asks for it on the page.
    made = agent.post("/api/v1/calls", json={"tool": "hostile__render", "arguments": {"text": "from the api"}})
    assert made.status_code == 201, made.text
    assert made.json()["status"] == "succeeded", made.text
    result = host.call_over_mcp("hostile-http__render", {"text": "over mcp"})
    assert not result.is_error, result
    refreshes_before = _refreshes(host)
    csrf = admin.cookies["csrftoken"]
    refreshed = admin.post("/servers/hostile-http/refresh/", data={"csrfmiddlewaretoken": csrf})
    assert refreshed.status_code == 200
    wait_until(lambda: _refreshes(host) > refreshes_before, timeout=60, what="the worker to refresh hostile-http")
    assert len(host.received()) > before
    kinds = {(r["kind"], r["value"]) for r in host.received()}
    assert ("env", ENV_SECRET) in kinds and ("authorization", HEADER_VALUE) in kinds, kinds

    call_id = made.json()["call_id"]
    for url in ("/", "/servers/", "/servers/hostile/", "/servers/hostile-http/", "/catalog/", "/calls/",
                f"/calls/{call_id}/", "/calls/pending/", "/agents/", "/outbox/", "/metrics",
                "/admin/catalog/server/", "/admin/catalog/server/1/change/", "/admin/catalog/server/2/change/",
                "/admin/gateway/agenttoken/", "/api/v1/servers", "/api/v1/tools", "/api/v1/calls",
                "/api/v1/openapi.json", f"/calls/{call_id}/result.json"):  # fmt: skip
        response = admin.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert_no_secret(response.text, secrets, f"GET {url} on the running host")
    for url in ("/api/v1/servers", "/api/v1/servers/hostile", "/api/v1/tools", "/api/v1/calls"):
        assert_no_secret(agent.get(url).text, secrets, f"GET {url} (agent) on the running host")
    metrics = agent.get("/metrics", headers={"Authorization": f"Bearer {host.secrets['METRICS_TOKEN']}"})
    assert metrics.status_code == 200
    assert_no_secret(metrics.text, secrets, "/metrics on the running host")
    admin.close()
    agent.close()

    output = host.output
    json_lines = [json.loads(line.split(" | ", 1)[1]) for line in output.splitlines()
                  if " | {" in line and line.rstrip().endswith("}")]  # fmt: skip
    assert len(json_lines) > 50, output[-2000:]
    assert {"debug", "info"} <= {line["level"] for line in json_lines}
    assert any(line.get("logger", "").startswith("hostapp") for line in json_lines)
    assert_no_secret(output, secrets, "the running host's output")
