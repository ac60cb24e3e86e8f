"""The JSON API against its own OpenAPI schema, fuzzed by schemathesis on a running host.

Every operation gets a bounded number of generated requests (schemathesis's examples,
coverage and fuzzing phases, positive and negative), once as the agent (bearer token) and
once as the staff administrator (session cookie and CSRF token): none may answer 5xx, and
every documented answer must match its schema.

The schema is built in-process at import, because schemathesis parametrizes tests at
collection time (its lazy `schemathesis.pytest.from_fixture` loader fails under pytest 9:
it sets `Node._nodeid`, which pytest 9 no longer has). The first test proves that the
running host serves exactly this schema to an agent, so the fuzzing covers what clients see.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

import httpx
import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from hostapp.api import api

from .host import SecureHost

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
# Bounded so that both personas finish well inside a minute; derandomized so a CI failure
# reproduces locally.
FUZZ = settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)

SCHEMA = api.get_openapi_schema()
schema = schemathesis.openapi.from_dict(SCHEMA)
# The personas' credentials are sent by the tests; generated ones would only collide with them.
schema.config.generation.update(with_security_parameters=False)
OPERATIONS = [op.ok().label for op in schema.get_all_operations()]

# persona -> operation label -> status -> count, for the summary test at the end of the module.
SEEN: dict[str, dict[str, Counter[int]]] = {"agent": defaultdict(Counter), "admin": defaultdict(Counter)}


@pytest.fixture(scope="module")
def admin_session(host: SecureHost) -> dict[str, Any]:
    client = host.login("admin")
    cookies = {name: client.cookies[name] for name in ("sessionid", "csrftoken")}
    client.close()
    return {"cookies": cookies, "headers": {"X-CSRFToken": cookies["csrftoken"]}}


@pytest.mark.slow
def test_the_host_serves_this_schema_to_an_agent(host: SecureHost) -> None:
    url = f"{host.url}/api/v1/openapi.json"
    auth = {"Authorization": f"Bearer {host.token}"}
    response = httpx.get(url, headers=auth, timeout=15)
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(SCHEMA))
    served = schemathesis.openapi.from_url(url, headers=auth, timeout=15)
    labels = sorted(op.ok().label for op in served.get_all_operations())
    assert labels == sorted(OPERATIONS)
    assert len(labels) >= 15, labels


@pytest.mark.slow
@schema.parametrize()
@FUZZ
def test_the_api_as_an_agent_answers_within_its_schema(case: schemathesis.Case, host: SecureHost) -> None:
    response = case.call_and_validate(
        base_url=host.url, headers={"Authorization": f"Bearer {host.token}"}, checks=CHECKS, timeout=15
    )
    SEEN["agent"][case.operation.label][response.status_code] += 1


@pytest.mark.slow
@schema.parametrize()
@FUZZ
def test_the_api_as_a_staff_session_answers_within_its_schema(
    case: schemathesis.Case, host: SecureHost, admin_session: dict[str, Any]
) -> None:
    response = case.call_and_validate(
        base_url=host.url,
        headers=admin_session["headers"],
        cookies=admin_session["cookies"],
        checks=CHECKS,
        timeout=15,
    )
    SEEN["admin"][case.operation.label][response.status_code] += 1


@pytest.mark.slow
def test_the_fuzzing_reached_the_views_not_just_the_door() -> None:
    """After the two above (file order): every operation was tried; nobody was taken for a
    stranger; the reads answered 200 and the agent met 403 wherever a person is needed."""
    if not SEEN["agent"] or not SEEN["admin"]:
        pytest.skip("run with the fuzzing tests above")
    for persona, by_operation in SEEN.items():
        assert len(by_operation) == len(OPERATIONS), (persona, sorted(by_operation))
        for label, statuses in by_operation.items():
            assert statuses[401] == 0, (persona, label, statuses)
        for label in ("GET /api/v1/servers", "GET /api/v1/tools", "GET /api/v1/calls"):
            assert by_operation[label][200] > 0, (persona, label, by_operation[label])
    agent = SEEN["agent"]
    for label in ("GET /api/v1/approvals", "GET /api/v1/outbox", "POST /api/v1/approvals/{call_id}/approve",
                  "POST /api/v1/outbox/{action_id}/redrive", "POST /api/v1/servers/{name}/refresh",
                  "GET /api/v1/inputs", "POST /api/v1/inputs/{input_id}/answer"):  # fmt: skip
        assert agent[label][403] > 0 and agent[label][200] == 0, (label, agent[label])
    assert SEEN["admin"]["GET /api/v1/approvals"][200] > 0
    for persona, by_operation in SEEN.items():
        statuses = sum(by_operation.values(), Counter())
        print(f"schemathesis, {persona}: {sum(statuses.values())} requests, by status {dict(sorted(statuses.items()))}")


# --- what the fuzzing found ---------------------------------------------------------------------------

HUGE = 2**70


@pytest.mark.django_db
def test_a_huge_offset_is_a_client_error_not_a_server_error(admin_user: Any) -> None:
    from hostapp.gateway.tokens import create_token

    _, token = create_token("deploy-bot")
    agent = Client(headers={"Authorization": f"Bearer {token}"}, raise_request_exception=False)
    admin = Client(raise_request_exception=False)
    admin.force_login(admin_user)
    answers = {
        url: client.get(url).status_code
        for client, url in (
            (agent, f"/api/v1/tools?offset={HUGE}"),
            (agent, f"/api/v1/calls?offset={HUGE}"),
            (admin, f"/api/v1/outbox?offset={HUGE}"),
        )  # fmt: skip
    }
    assert all(status < 500 for status in answers.values()), answers


def _documented(method: str, path: str) -> set[int]:
    return {int(code) for code in SCHEMA["paths"][path][method]["responses"]}


@pytest.mark.django_db
def test_every_status_the_api_answers_is_in_its_schema(waiting_call: Any, agent_token: tuple[Any, str]) -> None:
    agent = Client(headers={"Authorization": f"Bearer {agent_token[1]}"})
    probes = [
        ("get", "/api/v1/approvals", agent.get("/api/v1/approvals")),
        ("get", "/api/v1/calls/{call_id}", agent.get("/api/v1/calls/not-a-number")),
        ("get", "/api/v1/tools", agent.get("/api/v1/tools?status=retired")),
        ("get", "/api/v1/calls", agent.get("/api/v1/calls?offset=many")),
        ("get", "/api/v1/inputs", agent.get("/api/v1/inputs")),
        ("get", "/api/v1/inputs/{input_id}", agent.get("/api/v1/inputs/not-a-number")),
        (
            "post",
            "/api/v1/inputs/{input_id}/answer",
            agent.post("/api/v1/inputs/1/answer", {"action": "maybe"}, content_type="application/json"),
        ),
    ]
    undocumented = {
        f"{method.upper()} {path} -> {response.status_code}"
        for method, path, response in probes
        if response.status_code not in _documented(method, path)
    }
    assert {r.status_code for _, _, r in probes} <= {400, 403}
    assert not undocumented, sorted(undocumented)
