"""The JSON API's requests for input: /api/v1/inputs, one request, its answer, and the
open requests a call's detail names.

The personas: april the approver (may answer every request), olivia the outsider (may
answer the requests of her own calls only), and deploy-bot, an agent (never answers).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.dateparse import parse_datetime

from hostapp.api import api
from hostapp.calls import actions, inputs
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.models import Server
from hostapp.gateway.tokens import create_token
from hostapp.mcp import InputAsk
from tests.helpers import wait_until

from .conftest import client_for, requester
from .test_input_cli import everything  # noqa: F401 (a fixture: server-everything in this process's pool)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "colour": {"type": "string", "enum": ["red", "green"], "default": "red"},
    },
    "required": ["name"],
}


def running_call(req: Any = None) -> Call:
    """A call of the read-only `ops__status`, running (nobody delivers it)."""
    call = actions.start_call("ops__status", {}, req or requester(), run=False)
    assert call.status == Call.RUNNING
    return call


def ask(call: Call, message: str = "Who are you?") -> InputRequest:
    params = {"message": message, "requestedSchema": FORM}
    return inputs.open_request(call.pk, InputAsk(server="ops", params=params, era="legacy"))


def answer(client: Client, row: InputRequest, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/inputs/{row.pk}/answer", json.dumps(body), content_type="application/json")


TIMES = ("created_at", "expires_at", "answered_at")


def summary(row: InputRequest, content: Any = None) -> dict[str, Any]:
    """`row.summary()` and `content` as the API sends them (its times as Django's encoder
    writes a datetime)."""
    row.refresh_from_db()
    shown = {**row.summary(), "content": content}
    for key in TIMES:
        shown[key] = parse_datetime(shown[key]) if shown[key] else None
    return json.loads(json.dumps(shown, cls=DjangoJSONEncoder))


@pytest.fixture
def agent(db: None) -> tuple[Any, Client]:
    record, token = create_token("deploy-bot")
    return record, Client(headers={"Authorization": f"Bearer {token}"})


# --- GET /inputs ------------------------------------------------------------------------------------------


def test_an_approver_lists_every_open_request_oldest_first(ops: Server, approver_client: Client) -> None:
    first, second = ask(running_call()), ask(running_call())
    inputs.answer(ask(running_call()).pk, "decline", name="cli")

    response = approver_client.get("/api/v1/inputs")

    assert response.status_code == 200
    assert response.json() == [summary(first), summary(second)]


def test_a_person_lists_only_the_requests_of_their_own_calls(ops: Server, plain_user: User) -> None:
    mine = ask(running_call(requester(plain_user)))
    ask(running_call())

    rows = client_for(plain_user).get("/api/v1/inputs").json()

    assert [r["id"] for r in rows] == [mine.pk]


def test_an_agent_lists_no_requests_it_is_a_person_who_answers(ops: Server, agent: tuple[Any, Client]) -> None:
    response = agent[1].get("/api/v1/inputs")

    assert response.status_code == 403
    assert response.json() == {"error": "agent tokens cannot do this; a person must"}


# --- GET /inputs/{id} ------------------------------------------------------------------------------------


def test_one_request_shows_its_answer_to_whoever_may_answer_only(
    ops: Server, approver_client: Client, outsider_client: Client
) -> None:
    row = ask(running_call())
    inputs.answer(row.pk, "accept", {"name": "Ada"}, name="cli")

    shown = approver_client.get(f"/api/v1/inputs/{row.pk}").json()
    hidden = outsider_client.get(f"/api/v1/inputs/{row.pk}").json()

    assert shown == summary(row, {"name": "Ada", "colour": "red"})
    assert hidden == summary(row)
    assert (hidden["status"], hidden["answered_by"], hidden["content"]) == ("accept", "cli", None)


def test_an_agent_reads_the_requests_of_its_own_calls_without_answers(ops: Server, agent: tuple[Any, Client]) -> None:
    record, client = agent
    its = ask(running_call(actions.Requester(Call.AGENT, record.name, agent=record)))
    inputs.answer(its.pk, "accept", {"name": "Ada"}, name="april")
    others = ask(running_call())

    assert client.get(f"/api/v1/inputs/{its.pk}").json() == summary(its)
    assert client.get(f"/api/v1/inputs/{others.pk}").status_code == 404


def test_an_unknown_request_is_404(approver_client: Client) -> None:
    response = approver_client.get("/api/v1/inputs/999")

    assert (response.status_code, response.json()) == (404, {"error": "no input request #999"})


# --- POST /inputs/{id}/answer ------------------------------------------------------------------------------


def test_an_approver_accepts_with_content_and_the_call_goes_on(
    ops: Server, approver: User, approver_client: Client
) -> None:
    row = ask(running_call())

    response = answer(approver_client, row, {"action": "accept", "content": {"name": "Ada", "age": 36}})

    assert response.status_code == 200
    body = response.json()
    # What was left out is the form's default, on record as given.
    assert body == summary(row, {"name": "Ada", "age": 36, "colour": "red"})
    assert (body["status"], body["answered_via"], body["answered_by"]) == ("accept", "person", "april")
    row.refresh_from_db()
    assert row.answered_by == approver
    assert row.call.status == Call.RUNNING
    assert inputs.result_of(row) == {"action": "accept", "content": {"name": "Ada", "age": 36, "colour": "red"}}


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_person_declines_or_cancels_the_request_of_their_own_call(ops: Server, plain_user: User, action: str) -> None:
    row = ask(running_call(requester(plain_user)))

    response = answer(client_for(plain_user), row, {"action": action})

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["content"]) == (action, None)


def test_content_that_does_not_fit_is_400_naming_every_field(ops: Server, approver_client: Client) -> None:
    row = ask(running_call())

    response = answer(approver_client, row, {"action": "accept", "content": {"age": 200, "shoe": 42}})

    assert response.status_code == 400
    assert response.json() == {
        "error": "name: is required",
        "errors": [
            {"path": "name", "message": "is required"},
            {"path": "age", "message": "must be at most 150"},
            {"path": "shoe", "message": "is not asked for"},
        ],
    }
    row.refresh_from_db()
    assert row.status == InputRequest.OPEN


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"action": "maybe"}, "payload.action: Input should be 'accept', 'decline' or 'cancel'"),
        ({"action": "accept", "content": ["Ada"]}, "payload.content: Input should be a valid dictionary"),
    ],
)
def test_a_malformed_answer_is_400(ops: Server, approver_client: Client, body: dict[str, Any], error: str) -> None:
    row = ask(running_call())

    response = answer(approver_client, row, body)

    assert (response.status_code, response.json()) == (400, {"error": error})


def test_a_person_may_not_answer_anothers_call(ops: Server, outsider_client: Client) -> None:
    row = ask(running_call())

    response = answer(outsider_client, row, {"action": "decline"})

    assert response.status_code == 403
    assert response.json() == {
        "error": "only whoever asked for the call, or an approver, may answer its requests for input"
    }
    row.refresh_from_db()
    assert row.status == InputRequest.OPEN


def test_an_agent_may_not_answer_even_its_own_calls_request(ops: Server, agent: tuple[Any, Client]) -> None:
    record, client = agent
    row = ask(running_call(actions.Requester(Call.AGENT, record.name, agent=record)))

    response = answer(client, row, {"action": "accept", "content": {"name": "Ada"}})

    assert (response.status_code, response.json()) == (403, {"error": "agent tokens cannot do this; a person must"})
    row.refresh_from_db()
    assert row.status == InputRequest.OPEN


def test_answering_an_unknown_request_is_404(approver_client: Client) -> None:
    response = approver_client.post("/api/v1/inputs/999/answer", {"action": "cancel"}, content_type="application/json")

    assert (response.status_code, response.json()) == (404, {"error": "no input request #999"})


def test_answering_a_request_no_longer_open_is_409(ops: Server, approver_client: Client) -> None:
    row = ask(running_call())
    inputs.answer(row.pk, "decline", name="cli")

    response = answer(approver_client, row, {"action": "accept", "content": {"name": "Ada"}})

    assert response.status_code == 409
    assert response.json() == {"error": f"input request #{row.pk} is declined: it takes no answer"}


# --- calls name their open requests ---------------------------------------------------------------------


def test_a_call_waiting_for_input_names_its_open_requests(ops: Server, approver_client: Client) -> None:
    call = running_call()
    first, second = ask(call), ask(call)

    waiting = approver_client.get(f"/api/v1/calls/{call.pk}").json()
    inputs.answer(first.pk, "decline", name="cli")
    still = approver_client.get(f"/api/v1/calls/{call.pk}").json()
    inputs.answer(second.pk, "cancel", name="cli")
    going_on = approver_client.get(f"/api/v1/calls/{call.pk}").json()

    assert (waiting["status"], waiting["input_requests"]) == ("input", [first.pk, second.pk])
    assert (still["status"], still["input_requests"]) == ("input", [second.pk])
    assert (going_on["status"], going_on["input_requests"]) == ("running", [])


def test_the_call_list_reads_the_open_requests_of_a_page_in_one_query(
    ops: Server, approver_client: Client, django_assert_num_queries: Any
) -> None:
    ask(running_call())
    running_call()
    with CaptureQueriesContext(connection) as one:
        approver_client.get("/api/v1/calls")
    for _ in range(3):
        ask(running_call())

    with django_assert_num_queries(len(one.captured_queries)):
        rows = approver_client.get("/api/v1/calls").json()

    assert [r["status"] for r in rows] == ["input", "input", "input", "running", "input"]
    assert all(len(r["input_requests"]) == (r["status"] == "input") for r in rows)


# --- the schema --------------------------------------------------------------------------------------------


def test_the_schema_describes_the_requests_for_input() -> None:
    schema = api.get_openapi_schema()
    paths = schema["paths"]

    def statuses(method: str, path: str) -> set[int]:
        return {int(code) for code in paths[f"/api/v1{path}"][method]["responses"]}

    assert statuses("get", "/inputs") == {200, 400, 401, 403}
    assert statuses("get", "/inputs/{input_id}") == {200, 400, 401, 403, 404}
    assert statuses("post", "/inputs/{input_id}/answer") == {200, 400, 401, 403, 404, 409}
    answer_op = paths["/api/v1/inputs/{input_id}/answer"]["post"]
    assert answer_op["tags"] == ["inputs"]
    assert answer_op["responses"][400]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AnswerError"
    }
    components = schema["components"]["schemas"]
    assert components["AnswerIn"]["properties"]["action"]["enum"] == ["accept", "decline", "cancel"]
    row_keys = {"id", "call_id", "server", "mode", "message", "requested_schema", "url", "sensitive", "status", "round",
                "created_at", "expires_at", "answered_via", "answered_by", "answered_at"}  # fmt: skip
    assert set(components["InputOut"]["properties"]) == {*row_keys, "content"}
    assert "input_requests" in components["CallOut"]["properties"]


# --- a call run at once whose server asks (server-everything) -------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("everything")
def test_a_call_answers_as_soon_as_its_server_asks_and_ends_once_answered(approver: User) -> None:
    client = client_for(approver)

    made = client.post("/api/v1/calls", {"tool": "everything__trigger-elicitation-request"}, "application/json")

    assert made.status_code == 201
    call = made.json()
    assert (call["status"], len(call["input_requests"])) == ("input", 1)
    asked = client.get(f"/api/v1/inputs/{call['input_requests'][0]}").json()
    assert (asked["call_id"], asked["server"], asked["mode"], asked["status"]) == (
        call["call_id"],
        "everything",
        "form",
        "open",
    )
    assert asked["requested_schema"]["required"] == ["name"]
    assert client.get("/api/v1/inputs").json() == [asked]

    answered = client.post(f"/api/v1/inputs/{asked['id']}/answer", {"action": "decline"}, "application/json")

    assert (answered.status_code, answered.json()["status"]) == (200, "decline")
    ended = wait_until(
        lambda: (c := client.get(f"/api/v1/calls/{call['call_id']}").json())["status"] == "succeeded" and c,
        timeout=30,
        what="the call to end",
    )
    assert ended["input_requests"] == []
    assert "User declined to provide the requested information." in ended["result"]["content"][0]["text"]
