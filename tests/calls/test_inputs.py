"""Requests for input during a call (hostapp/calls/inputs.py), with server-everything as users
run it (npm, stdio): its `trigger-elicitation-request` asks for a form and
`trigger-url-elicitation` for a URL to be opened, and both wait for the answer.

A call run at once in this process (read-only by an admin's class override) comes back
waiting for input as soon as the server asks; a person answers (the action the pages, the CLI
and the API call), and the call ends with what the server made of the answer. An outbox
delivery waits in the worker the same way, keeping its lease. What the server asks is
checked before anyone sees it; the answer is checked against what was asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from hostapp.calls import inputs
from hostapp.calls.actions import Requester, start_call
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog import actions as catalog_actions
from hostapp.catalog.models import Server, Tool
from hostapp.catalog.pool import close_pool, refresh_server
from hostapp.mcp import InputAsk
from tests.helpers import wait_until
from tests.mcp.test_interop import EVERYTHING, NODE, _need_node

FORM_TOOL = "everything__trigger-elicitation-request"
URL_TOOL = "everything__trigger-url-elicitation"
ANSWER = {"name": "Ada Lovelace", "email": "ada@example.com", "integer": 7, "check": True}


@pytest.fixture
def everything(transactional_db: None) -> Iterator[Server]:
    """server-everything over stdio, trusted, its eliciting tools run at once (read-only);
    stopped before the database goes (it announces list changes, which read it)."""
    _need_node()
    server = Server.objects.create(name="everything", command=str(NODE), args=[str(EVERYTHING)], trusted=True)
    result = refresh_server(server)
    assert result.ok, result.error
    for name in (FORM_TOOL, URL_TOOL):
        catalog_actions.set_class_override(Tool.objects.get(exposed_name=name), "read_only")
    yield server
    close_pool()


def _text(call: Call) -> str:
    return "\n".join(c.get("text", "") for c in (call.result or {}).get("content", []))


def _ended(call: Call, timeout: float = 30) -> Call:
    wait_until(lambda: Call.objects.get(pk=call.pk).ended, timeout=timeout, what=f"call #{call.pk} to end")
    return Call.objects.get(pk=call.pk)


def _asked(call: Call) -> InputRequest:
    return InputRequest.objects.get(call=call, status=InputRequest.OPEN)


# -- the web process / CLI path ---------------------------------------------------------------


def test_a_call_that_asks_for_input_waits_for_a_person_and_ends_with_the_answer(
    everything: Server, admin_user: User
) -> None:
    call = start_call(FORM_TOOL, {}, Requester.for_user(admin_user))

    assert call.status == Call.INPUT
    asked = _asked(call)
    assert asked.server_name == "everything" and asked.mode == InputRequest.FORM
    assert asked.message == "Please provide inputs for the following fields:"
    schema = asked.requested_schema
    assert schema["required"] == ["name"]
    assert set(schema["properties"]) >= {"name", "email", "birthdate", "titledMultipleSelectEnum", "legacyTitledEnum"}
    assert schema["properties"]["legacyTitledEnum"]["enumNames"][0] == "Cats"
    assert not asked.sensitive  # a description that warns against a PIN asks for none
    assert [e.kind for e in call.events.all()] == ["created", "input_requested"]

    inputs.answer(asked.pk, "accept", ANSWER, person=admin_user)

    done = _ended(call)
    assert done.status == Call.SUCCEEDED
    text = _text(done)
    assert "User provided the requested information" in text
    assert "- Name: Ada Lovelace" in text and "- Favorite Integer: 7" in text
    # The schema's defaults travel with the answer for what the person left out (SEP-1034).
    raw = json.loads(text.split("Raw result:", 1)[1])
    assert raw["content"]["firstLine"] == "It was a dark and stormy night."
    assert raw["content"]["untitledMultipleSelectEnum"] == ["Guitar"]
    answered = InputRequest.objects.get(pk=asked.pk)
    assert answered.status == InputRequest.ACCEPTED
    # On record as the server got it: what the person gave, and the defaults of the rest.
    assert answered.content == {**raw["content"], **ANSWER} == raw["content"]
    assert answered.answered_by == admin_user and answered.answered_via == InputRequest.PERSON
    kinds = [e.kind for e in done.events.all()]
    assert kinds == ["created", "input_requested", "input_answered", "succeeded"]
    # Who answered is in the history; what they answered is not.
    assert "Ada" not in json.dumps([e.detail for e in done.events.all()])


@pytest.mark.parametrize(("action", "said"), [("decline", "User declined"), ("cancel", "User cancelled")])
def test_a_declined_or_cancelled_request_ends_as_the_server_says(
    everything: Server, admin_user: User, action: str, said: str
) -> None:
    call = start_call(FORM_TOOL, {}, Requester.for_user(admin_user))
    inputs.answer(_asked(call).pk, action, person=admin_user)

    done = _ended(call)
    assert done.status == Call.SUCCEEDED
    assert said in _text(done)
    assert InputRequest.objects.get(call=call).status == action


def test_an_answer_that_breaks_the_schema_is_refused_and_the_request_stays_open(
    everything: Server, admin_user: User
) -> None:
    call = start_call(FORM_TOOL, {}, Requester.for_user(admin_user))
    asked = _asked(call)

    with pytest.raises(inputs.InputError) as refused:
        inputs.answer(asked.pk, "accept", {"email": "not-an-address", "integer": 500}, person=admin_user)

    paths = {e["path"]: e["message"] for e in refused.value.errors}
    assert paths == {"name": "is required", "email": "must be an email address", "integer": "must be at most 100"}
    assert InputRequest.objects.get(pk=asked.pk).is_open
    inputs.answer(asked.pk, "cancel", person=admin_user)
    assert _ended(call).status == Call.SUCCEEDED
    with pytest.raises(inputs.InputError) as closed:
        inputs.answer(asked.pk, "decline", person=admin_user)
    assert closed.value.status == 409


def test_nobody_answering_in_time_is_a_cancel_from_the_host(
    everything: Server, admin_user: User, settings: Any
) -> None:
    settings.PATCHBAY_INPUT_WAIT = 1
    call = start_call(FORM_TOOL, {}, Requester.for_user(admin_user))

    done = _ended(call)
    assert "User cancelled" in _text(done)
    row = InputRequest.objects.get(call=call)
    assert row.status == InputRequest.EXPIRED and row.answered_via == InputRequest.HOST
    assert [e.kind for e in done.events.all()] == ["created", "input_requested", "input_expired", "succeeded"]


def test_a_url_request_is_answered_once_the_person_went_there(everything: Server, admin_user: User) -> None:
    call = start_call(URL_TOOL, {"url": "https://example.com/connect?state=1"}, Requester.for_user(admin_user))

    asked = _asked(call)
    assert asked.mode == InputRequest.URL
    assert asked.url == "https://example.com/connect?state=1"
    assert asked.elicitation_id and asked.requested_schema is None
    inputs.answer(asked.pk, "accept", person=admin_user)

    done = _ended(call)
    assert done.status == Call.SUCCEEDED and "accept" in _text(done)


def test_the_answer_reaches_a_call_waiting_in_another_thread_at_once(everything: Server, admin_user: User) -> None:
    """The answering thread wakes the waiting one (no reading again after RECHECK)."""
    call = start_call(FORM_TOOL, {}, Requester.for_user(admin_user))
    asked = _asked(call)
    answered = threading.Event()

    def answer() -> None:
        inputs.answer(asked.pk, "decline", person=admin_user)
        answered.set()

    threading.Thread(target=answer).start()
    assert answered.wait(10)
    assert _ended(call, timeout=inputs.RECHECK * 0.9 + 5).status == Call.SUCCEEDED


# -- what the server asks is checked first -------------------------------------------------------


def _running_call(admin_user: User) -> Call:
    from hostapp.calls import life
    from hostapp.calls.policy import Decision
    from tests.calls.conftest import catalog, tool_def

    catalog("s", tool_def("t", {"readOnlyHint": True}))
    tool = Tool.objects.select_related("server").get(exposed_name="s__t")
    fields = life.new_fields(tool, Decision(Call.RUN, ""), Requester.for_user(admin_user), {}, "d", _now())
    return life.open_call(fields)


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"message": "m", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}}, "type"),
        ({"message": "m", "requestedSchema": {"type": "array"}}, "not an object"),
        ({"mode": "url", "message": "m", "url": "javascript:alert(1)", "elicitationId": "e"}, "http or https"),
        ({"mode": "url", "message": "m", "url": "file:///etc/passwd", "elicitationId": "e"}, "http or https"),
        ({"mode": "telepathy", "message": "m"}, "unknown mode"),
    ],
)
def test_what_cannot_be_shown_to_a_person_is_refused_before_anyone_sees_it(
    db: None, admin_user: User, params: dict[str, Any], why: str
) -> None:
    call = _running_call(admin_user)
    with pytest.raises(inputs.InvalidAsk, match=why):
        inputs.open_request(call.pk, InputAsk(server="s", params=params, era="legacy"))
    assert not InputRequest.objects.exists()
    assert Call.objects.get(pk=call.pk).status == Call.RUNNING


def test_a_round_with_a_request_that_cannot_be_shown_is_not_passed_on_and_says_why() -> None:
    """A 2026-07-28 round (a call's or a read's) is checked as a whole before an agent sees it:
    its sampling requests are the agent's, its requests for input must be showable."""
    sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    bad = {"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "javascript:x"}}
    assert inputs.check_round("s", {"model": sampling}) == {}
    with pytest.raises(inputs.InvalidAsk) as refused:
        inputs.check_round("s", {"model": sampling, "open": bad})
    failure = refused.value.failure()
    assert failure.kind == "protocol"
    assert failure.message == (
        "the server asked for input the host will not pass on: the URL to open must be an http or https URL"
    )


def test_the_servers_words_are_sanitized_and_a_form_asking_for_a_secret_is_flagged(db: None, admin_user: User) -> None:
    call = _running_call(admin_user)
    schema = {
        "type": "object",
        "properties": {"api_key": {"type": "string", "title": "Key\u202e"}, "n": {"type": "integer"}},
        "required": ["api_key", "missing"],
        "$schema": "ignored",
    }
    row = inputs.open_request(
        call.pk, InputAsk(server="s", params={"message": "Hello\u200b there", "requestedSchema": schema}, era="legacy")
    )
    assert row.message == "Hello there"
    assert row.requested_schema == {
        "type": "object",
        "properties": {"api_key": {"type": "string", "title": "Key"}, "n": {"type": "integer"}},
        "required": ["api_key"],
    }
    assert row.sensitive
    assert Call.objects.get(pk=call.pk).status == Call.INPUT


def test_a_call_runs_again_only_once_none_of_its_requests_is_open(db: None, admin_user: User) -> None:
    call = _running_call(admin_user)
    ask = InputAsk(server="s", params={"message": "m", "requestedSchema": {"type": "object"}}, era="modern", key="a")
    first = inputs.open_request(call.pk, ask)
    second = inputs.open_request(call.pk, InputAsk(server="s", params=ask.params, era="modern", key="b"))
    assert (first.round, second.round) == (1, 2)

    inputs.answer(first.pk, "accept", {}, person=admin_user)
    assert Call.objects.get(pk=call.pk).status == Call.INPUT
    inputs.withdraw(second.pk)
    assert Call.objects.get(pk=call.pk).status == Call.RUNNING


def test_who_may_answer(db: None, admin_user: User, approver: User, plain_user: User) -> None:
    call = _running_call(admin_user)
    assert inputs.can_answer(admin_user, call)
    assert inputs.can_answer(approver, call)
    assert not inputs.can_answer(plain_user, call)


def test_defaults_fill_only_what_the_answer_leaves_out() -> None:
    schema = {"properties": {"a": {"type": "string", "default": "x"}, "b": {"type": "integer", "default": 3}}}
    assert inputs.with_defaults(schema, {"a": "given"}) == {"a": "given", "b": 3}


@pytest.mark.parametrize(
    ("spec", "value", "problem"),
    [
        ({"type": "string", "format": "date"}, "2026-13-40", "must be a date"),
        ({"type": "string", "format": "date-time"}, "2026-12-03T10:00:00Z", ""),
        ({"type": "string", "format": "uri"}, "no scheme", "must be a URI"),
        ({"type": "string", "enum": ["a", "b"]}, "c", "not one of the choices"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}, "a", ""),
        ({"type": "string", "minLength": 3}, "ab", "at least 3"),
        ({"type": "integer"}, 1.5, "whole number"),
        ({"type": "number", "minimum": 0}, -1, "at least 0"),
        ({"type": "boolean"}, "yes", "true or false"),
        ({"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 1}, ["a", "b"], "at most 1"),
        ({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}}, ["z"], "not one of"),
    ],
)
def test_each_kind_of_field_is_checked(spec: dict[str, Any], value: Any, problem: str) -> None:
    clean = inputs.clean_schema({"type": "object", "properties": {"f": spec}})
    found = inputs.check_content(clean, {"f": value})
    assert (found[0]["message"] if found else "").find(problem) >= 0 if problem else not found
