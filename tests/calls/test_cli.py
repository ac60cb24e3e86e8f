"""`manage.py mcp call|calls|approve|deny`: exit codes and the --json shapes.

`mcp call` exits 0 succeeded, 1 failed, 2 usage, 3 waiting for approval (or for input: see
test_input_cli.py), 4 queued and not finished within --wait; `call_command` raises SystemExit(code) for non-zero codes.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from hostapp.calls import actions
from hostapp.calls.models import Call, Rule
from hostapp.catalog.models import Server
from hostapp.outbox import actions as outbox
from hostapp.outbox.models import Action

from .conftest import requester

pytestmark = pytest.mark.django_db


def mcp(*args: str) -> tuple[int, str, str]:
    """Run `manage.py mcp ARGS` in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("mcp", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def mcp_json(*args: str) -> tuple[int, Any]:
    code, out, _ = mcp(*args, "--json")
    return code, json.loads(out)


# --- mcp call: exit codes ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_read_only_call_that_succeeds_exits_0_with_its_result(mailbox: Server) -> None:
    code, body = mcp_json("call", "mailbox__read", "--args", '{"message_id": "msg-0001"}')

    assert code == 0
    assert sorted(body) == ["call_id", "error", "result", "status"]
    assert (body["status"], body["error"]) == ("succeeded", None)
    assert body["result"]["structuredContent"]["id"] == "msg-0001"
    call = Call.objects.get(pk=body["call_id"])
    assert (call.requester_kind, call.requester_name, call.status) == (Call.CLI, "cli", Call.SUCCEEDED)


@pytest.mark.django_db(transaction=True)
def test_a_tool_error_exits_1_and_says_what_went_wrong(mailbox: Server) -> None:
    code, out, _ = mcp("call", "mailbox__read", "--args", '{"message_id": "msg-9999"}')

    assert code == 1
    call = Call.objects.get()
    lines = out.splitlines()
    assert lines[0] == f"call #{call.pk}: failed"
    assert lines[1].startswith("  error: ") and "No message with id 'msg-9999'." in lines[1]
    assert (call.is_error, call.error["kind"]) == (True, "tool")


def test_a_blocked_call_exits_1_with_the_rules_reason(ops: Server) -> None:
    Rule.objects.create(server_name="ops", tool_name="", action=Rule.BLOCK, reason="Ops is frozen.")

    code, body = mcp_json("call", "ops__status")

    assert code == 1
    assert (body["status"], body["error"]) == ("blocked", {"kind": "policy", "message": "Ops is frozen."})


def test_a_destructive_call_exits_3_and_says_how_to_approve_it(ops: Server) -> None:
    code, out, _ = mcp("call", "ops__wipe", "--args", '{"disk": "sdb"}')

    call = Call.objects.get()
    assert code == 3
    assert call.status == Call.WAITING
    assert f"call #{call.pk}: waiting for approval" in out
    assert f"approve with: manage.py mcp approve {call.pk}" in out


def test_a_waiting_call_answers_its_summary_as_json(ops: Server) -> None:
    code, body = mcp_json("call", "ops__wipe", "--args", '{"disk": "sdb"}')

    assert code == 3
    assert body == {
        "call_id": Call.objects.get().pk,
        "status": "waiting",
        "result": None,
        "error": None,
        "waiting_for": "approval",
    }


def test_a_write_call_without_a_worker_exits_4_after_waiting(ops: Server) -> None:
    code, body = mcp_json("call", "ops__restart", "--wait", "0.2")

    assert code == 4
    assert body["status"] == "queued"
    assert Action.objects.get().call_id == body["call_id"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["ops__status", "--args", "{not json"],
            "--args is not valid JSON: Expecting property name enclosed in double quotes at column 2",
        ),
        (["ops__nothing"], "no tool named 'ops__nothing'"),
        (["ops__wipe", "--args", '{"disk": 5}'], "invalid arguments at disk: 5 is not of type 'string'"),
        (["ops__wipe", "--args", "[]"], "invalid arguments: arguments must be a JSON object"),
    ],
)
def test_a_usage_error_exits_2_with_a_one_line_reason(ops: Server, args: list[str], message: str) -> None:
    code, out, err = mcp("call", *args)

    assert (code, out, err) == (2, "", message + "\n")
    assert not Call.objects.exists()


# --- mcp calls ------------------------------------------------------------------------------------------


def test_calls_lists_the_ledger_as_json_newest_first(ops: Server) -> None:
    first = actions.start_call("ops__wipe", {"disk": "sdb"}, requester(name="deploy-bot"))
    second = actions.start_call("ops__restart", {}, requester())

    code, rows = mcp_json("calls")

    assert code == 0
    assert [r["call_id"] for r in rows] == [second.pk, first.pk]
    assert rows[1] == {
        "call_id": first.pk,
        "created_at": first.created_at.isoformat(),
        "requester": "deploy-bot",
        "requester_kind": "cli",
        "tool": "ops__wipe",
        "server": "ops",
        "class": "destructive",
        "decision": "ask",
        "status": "waiting",
        "attempts": 0,
        "duration_ms": None,
        "error": None,
        # No past answers to learn from: ask (hostapp/calls/suggest.py).
        "suggestion": {"verdict": "ask", "probability": 0.5, "basis": [], "evidence": 0.0, "reason": "no past answers"},
    }


def test_calls_filters_by_status_and_limits(ops: Server) -> None:
    for disk in ("a", "b", "c"):
        actions.start_call("ops__wipe", {"disk": disk}, requester())
    actions.start_call("ops__restart", {}, requester())

    _, waiting = mcp_json("calls", "--status", "waiting", "--limit", "2")

    assert [r["status"] for r in waiting] == ["waiting", "waiting"]


def test_calls_prints_one_line_a_call(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "a"}, requester(name="deploy-bot"))

    code, out, _ = mcp("calls")

    assert code == 0
    assert out.split() == [f"#{call.pk}", "waiting", "ops__wipe", "deploy-bot"]


# --- mcp approve / deny -------------------------------------------------------------------------------------


def test_approve_queues_a_waiting_call(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    code, out, _ = mcp("approve", str(call.pk))

    assert (code, out) == (0, f"approved call #{call.pk}; it is queued for delivery\n")
    call.refresh_from_db()
    assert (call.status, call.decided_by_name) == (Call.QUEUED, "cli")
    assert not Rule.objects.exists()


def test_approve_always_leaves_a_rule(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    mcp("approve", str(call.pk), "--always")

    rule = Rule.objects.get()
    assert (rule.tool_name, rule.action, rule.reason) == ("ops__wipe", Rule.ALLOW, "always allowed by cli")


@pytest.mark.django_db(transaction=True)
def test_a_call_approved_from_the_command_line_is_delivered(mailbox: Server) -> None:
    code, body = mcp_json("call", "mailbox__delete", "--args", '{"message_id": "msg-0002"}')
    assert (code, body["status"]) == (3, "waiting")
    mcp("approve", str(body["call_id"]))

    outbox.deliver(Action.objects.get(call_id=body["call_id"]).pk, "test-worker")

    code, rows = mcp_json("calls")
    assert code == 0
    assert (rows[0]["call_id"], rows[0]["status"], rows[0]["attempts"]) == (body["call_id"], "succeeded", 1)


def test_approving_twice_is_a_command_error(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())
    mcp("approve", str(call.pk))

    with pytest.raises(CommandError, match=f"call #{call.pk} is queued, not waiting for approval"):
        mcp("approve", str(call.pk))


def test_approving_an_unknown_call_is_a_command_error(db: None) -> None:
    with pytest.raises(CommandError, match="no call #999"):
        mcp("approve", "999")
    with pytest.raises(CommandError, match="no call #999"):
        mcp("deny", "999", "--reason", "no")


def test_deny_finishes_the_call_with_the_reason(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    code, out, _ = mcp("deny", str(call.pk), "--reason", "Use the staging disk.")

    assert (code, out) == (0, f"denied call #{call.pk}\n")
    call.refresh_from_db()
    assert (call.status, call.decided_by_name) == (Call.DENIED, "cli")
    assert call.error == {"kind": "denied", "message": "Denied: Use the staging disk."}


def test_deny_with_a_blank_reason_is_a_command_error(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    with pytest.raises(CommandError, match="a denial needs a reason"):
        mcp("deny", str(call.pk), "--reason", "  ")

    call.refresh_from_db()
    assert call.status == Call.WAITING


def test_deny_without_a_reason_is_a_usage_error(ops: Server) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    with pytest.raises(CommandError, match="the following arguments are required: --reason"):
        mcp("deny", str(call.pk))
