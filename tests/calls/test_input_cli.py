"""`manage.py mcp inputs|answer`, and `mcp call` while a call waits for a person.

`mcp answer` exits 0 answered, 1 not answered (no such request, no longer open, values that
do not fit the form), 2 usage; `mcp call` exits 3 while a call waits for approval or for
input, and stays while a call of its own process waits for input.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from hostapp.calls import actions, cli, inputs
from hostapp.calls.models import Call, InputRequest
from hostapp.catalog.models import Server
from hostapp.mcp import InputAsk
from tests.helpers import EVERYTHING, NODE, REPO, need_installed, wait_until

from .conftest import requester
from .test_cli import mcp

pytestmark = pytest.mark.django_db


FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "colour": {"type": "string", "enum": ["red", "green"], "default": "red"},
    },
    "required": ["name"],
}


def running_call(name: str = "cli") -> Call:
    """A call of the read-only `ops__status`, running (nobody delivers it)."""
    call = actions.start_call("ops__status", {}, requester(name=name), run=False)
    assert call.status == Call.RUNNING
    return call


def ask(call: Call, message: str = "Who are you?", **params: Any) -> InputRequest:
    return inputs.open_request(
        call.pk, InputAsk(server="ops", params={"message": message, "requestedSchema": FORM, **params}, era="legacy")
    )


def ask_url(call: Call) -> InputRequest:
    params = {
        "mode": "url",
        "message": "Sign in to the wiki",
        "url": "https://wiki.example/login",
        "elicitationId": "e1",
    }
    return inputs.open_request(call.pk, InputAsk(server="ops", params=params, era="legacy"))


# --- mcp inputs -------------------------------------------------------------------------------------


def test_inputs_prints_one_block_a_request_with_the_server_beside_its_message(ops: Server) -> None:
    first = ask(running_call())
    second = ask_url(running_call())

    code, out, _ = mcp("inputs")

    assert code == 0
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 2
    lines = blocks[0].splitlines()
    assert lines[0].startswith(f"input #{first.pk}  call #{first.call_id} ops__status  (form, expires ")
    assert lines[1] == "  ops: Who are you?"
    # As stored: PostgreSQL's jsonb does not keep the order of an object's keys.
    assert sorted(lines[2:6]) == [
        "  - age: integer in 0..150",
        '  - colour: string of red | green, default "red"',
        "  - email: email string",
        "  - name: string, required (Your name)",
    ]
    assert lines[6] == (
        f"  answer with: manage.py mcp answer {first.pk} --content JSON | --decline | --cancel, "
        f"or in the browser at /calls/inputs/{first.pk}/"
    )
    assert blocks[1].splitlines()[1:] == [
        "  ops: Sign in to the wiki",
        "  open: https://wiki.example/login",
        f"  answer with: manage.py mcp answer {second.pk} --accept | --decline | --cancel, "
        f"or in the browser at /calls/inputs/{second.pk}/",
    ]


def test_inputs_warns_of_a_form_that_asks_for_a_secret(ops: Server) -> None:
    ask(running_call(), message="Your API token, please")

    _, out, _ = mcp("inputs")

    assert "  warning: this form seems to ask for a secret; a form must not be used for one" in out


def test_a_field_name_with_control_characters_is_refused_before_it_is_listed(ops: Server) -> None:
    schema = {"type": "object", "properties": {"na\x1b[31mme": {"type": "string"}}}
    with pytest.raises(inputs.InvalidAsk, match="not plain text"):
        ask(running_call(), requestedSchema=schema)

    assert mcp("inputs") == (0, "", "")


def test_inputs_json_lists_the_open_requests_summaries(ops: Server) -> None:
    first = ask(running_call())
    answered = ask(running_call())
    inputs.answer(answered.pk, "decline", name="someone")
    third = ask_url(running_call())

    code, out, _ = mcp("inputs", "--json")

    assert code == 0
    rows = json.loads(out)
    assert rows == [json.loads(json.dumps(r.summary())) for r in (first, third)]
    assert rows[0]["server"] == "ops" and rows[0]["requested_schema"]["required"] == ["name"]
    assert "content" not in rows[0]


def test_inputs_lists_nothing_when_nothing_is_asked(db: None) -> None:
    assert mcp("inputs") == (0, "", "")
    assert mcp("inputs", "--json") == (0, "[]\n", "")


# --- mcp answer ----------------------------------------------------------------------------------------


def test_answer_with_content_accepts_as_the_cli(ops: Server) -> None:
    row = ask(running_call())

    code, out, err = mcp("answer", str(row.pk), "--content", '{"name": "Ada", "age": 36}')

    assert (code, out, err) == (0, f"input #{row.pk} of call #{row.call_id}: answered\n", "")
    row.refresh_from_db()
    assert (row.status, row.content, row.answered_via, row.answered_by_name) == (
        InputRequest.ACCEPTED,
        {"name": "Ada", "age": 36, "colour": "red"},  # what was left out: the form's default
        InputRequest.PERSON,
        "cli",
    )
    assert row.call.status == Call.RUNNING  # nothing else is asked: the call goes on


@pytest.mark.parametrize(
    ("flag", "status", "word"), [("--decline", "decline", "declined"), ("--cancel", "cancel", "cancelled")]
)
def test_answer_declines_or_cancels(ops: Server, flag: str, status: str, word: str) -> None:
    row = ask(running_call())

    code, out, _ = mcp("answer", str(row.pk), flag)

    assert (code, out) == (0, f"input #{row.pk} of call #{row.call_id}: {word}\n")
    row.refresh_from_db()
    assert (row.status, row.content, row.answered_by_name) == (status, None, "cli")


def test_answer_accept_without_content_accepts_a_url_request(ops: Server) -> None:
    row = ask_url(running_call())

    code, out, _ = mcp("answer", str(row.pk), "--accept")

    assert (code, out) == (0, f"input #{row.pk} of call #{row.call_id}: answered\n")
    row.refresh_from_db()
    assert (row.status, row.content) == (InputRequest.ACCEPTED, None)
    assert inputs.result_of(row) == {"action": "accept"}


def test_answer_accept_without_content_checks_the_form_as_empty(ops: Server) -> None:
    row = ask(running_call())

    code, out, err = mcp("answer", str(row.pk), "--accept")

    assert (code, out, err) == (1, "", "the answer does not fit the form: name: is required\n")


def test_values_that_do_not_fit_the_form_exit_1_naming_every_field(ops: Server) -> None:
    row = ask(running_call())

    code, out, err = mcp("answer", str(row.pk), "--content", '{"age": 200, "email": "nope", "shoe": 42}')

    assert (code, out) == (1, "")
    assert err == (
        "the answer does not fit the form: name: is required; age: must be at most 150; "
        "email: must be an email address; shoe: is not asked for\n"
    )
    row.refresh_from_db()
    assert row.status == InputRequest.OPEN


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "--content is not valid JSON: Expecting property name enclosed in double quotes at column 2"),
        ('["Ada"]', "--content must be a JSON object of the form's values"),
    ],
)
def test_content_that_is_not_a_json_object_is_a_usage_error(ops: Server, content: str, message: str) -> None:
    row = ask(running_call())

    assert mcp("answer", str(row.pk), "--content", content) == (2, "", message + "\n")
    row.refresh_from_db()
    assert row.status == InputRequest.OPEN


def test_answering_an_unknown_request_exits_1(db: None) -> None:
    assert mcp("answer", "999", "--decline") == (1, "", "no input request #999\n")


def test_answering_a_request_no_longer_open_exits_1_and_changes_nothing(ops: Server) -> None:
    row = ask(running_call())
    inputs.answer(row.pk, "decline", name="april")

    code, out, err = mcp("answer", str(row.pk), "--content", '{"name": "Ada"}')

    assert (code, out, err) == (1, "", f"input request #{row.pk} is declined: it takes no answer\n")
    row.refresh_from_db()
    assert (row.status, row.answered_by_name, row.content) == (InputRequest.DECLINED, "april", None)


def test_answer_takes_exactly_one_way_to_answer(ops: Server) -> None:
    row = ask(running_call())

    with pytest.raises(CommandError, match="one of the arguments --content --accept --decline --cancel is required"):
        mcp("answer", str(row.pk))
    with pytest.raises(CommandError, match="argument --cancel: not allowed with argument --decline"):
        mcp("answer", str(row.pk), "--decline", "--cancel")


# --- mcp call while a person is waited for ---------------------------------------------------------------


def test_a_destructive_call_exits_3_waiting_for_approval(ops: Server) -> None:
    code, out, _ = mcp("call", "ops__wipe", "--args", '{"disk": "sdb"}', "--json")

    assert code == 3
    assert json.loads(out) == {
        "call_id": Call.objects.get().pk,
        "status": "waiting",
        "result": None,
        "error": None,
        "waiting_for": "approval",
    }


def test_a_call_waiting_for_input_elsewhere_exits_3_naming_its_open_requests(ops: Server) -> None:
    """As `mcp call --wait` ends for a call a worker runs whose server waits for input."""
    call = running_call()
    first, second = ask(call), ask_url(call)
    inputs.answer(first.pk, "decline", name="april")
    call.refresh_from_db()

    assert call.status == Call.INPUT
    assert cli.exit_code(call) == cli.EXIT_WAITING
    assert cli.call_summary(call) == {
        "call_id": call.pk,
        "status": "input",
        "result": None,
        "error": None,
        "waiting_for": "input",
        "input_requests": [second.pk],
    }


def test_the_help_of_mcp_call_documents_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        call_command("mcp", "call", "--help")

    help_text = capsys.readouterr().out
    assert "exit codes:" in help_text
    assert "3  it waits for a person: for approval" in help_text


# --- a call of this process's own, its server asking for input (server-everything) ----------------------


@pytest.fixture
def everything(transactional_db: None) -> Iterator[Server]:
    """server-everything (npm) run for real through this process's pool; its form-asking tool
    made read-only by an admin's class override, so that it runs at once, in this process."""
    from hostapp.catalog.actions import set_class_override
    from hostapp.catalog.models import Tool
    from hostapp.catalog.pool import close_pool, refresh_server

    need_installed("server-everything", NODE, EVERYTHING)
    server = Server.objects.create(
        name="everything", transport="stdio", command=str(NODE), args=[str(EVERYTHING)], cwd=str(REPO), trusted=True
    )
    try:
        result = refresh_server(server)
        assert result.ok, result.error
        set_class_override(Tool.objects.get(exposed_name="everything__trigger-elicitation-request"), "read_only")
        yield server
    finally:
        close_pool()


class Running:
    """`mcp ARGS` run in a thread of this process (as another shell would run it)."""

    def __init__(self, *args: str) -> None:
        self.answer: tuple[int, str, str] | None = None
        self.thread = threading.Thread(target=self._run, args=args, daemon=True)
        self.thread.start()

    def _run(self, *args: str) -> None:
        try:
            self.answer = mcp(*args)
        finally:
            connections.close_all()

    def join(self, timeout: float) -> tuple[int, str, str]:
        self.thread.join(timeout)
        assert self.answer is not None, "the command did not end in time"
        return self.answer


@pytest.mark.django_db(transaction=True)
def test_a_call_of_its_own_waits_for_its_input_and_ends_as_the_call_does(everything: Server) -> None:
    running = Running("call", "everything__trigger-elicitation-request", "--json")

    row = wait_until(
        lambda: InputRequest.objects.filter(status=InputRequest.OPEN).first(), timeout=30, what="a request for input"
    )
    assert Call.objects.get(pk=row.call_id).status == Call.INPUT
    assert running.thread.is_alive()  # the call lives in its process: it waits
    code, listed, _ = mcp("inputs", "--json")
    assert [(r["id"], r["server"], r["mode"]) for r in json.loads(listed)] == [(row.pk, "everything", "form")]
    assert mcp("answer", str(row.pk), "--content", '{"name": "Ada Lovelace", "check": true}')[0] == 0

    code, out, err = running.join(timeout=30)

    body = json.loads(out)
    assert (code, body["call_id"], body["status"]) == (0, row.call_id, "succeeded")
    assert "waiting_for" not in body
    text = "\n".join(block["text"] for block in body["result"]["content"])
    assert "- Name: Ada Lovelace" in text
    assert '"firstLine": "It was a dark and stormy night."' in text  # the form's defaults went along
    assert err.splitlines()[0] == f"call #{row.call_id} waits for input #{row.pk}: everything: {row.message}"
    assert f"manage.py mcp answer {row.pk} --content JSON | --decline | --cancel" in err
    assert f"/calls/inputs/{row.pk}/" in err
