"""Approving and denying calls (`hostapp.calls.actions.approve|deny|expire_waiting`).

An approval is bound to the call's arguments and the tool's definition, is used once,
and expires; approve-and-always-allow leaves a rule on record; a denial's reason is
what the caller receives.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from hostapp.calls import actions
from hostapp.calls.actions import ApprovalError
from hostapp.calls.models import Call, Rule
from hostapp.catalog.actions import accept_tool, record_tools
from hostapp.catalog.models import Server
from hostapp.outbox import actions as outbox
from hostapp.outbox.models import Action

from .conftest import DESTRUCTIVE, READ_ONLY, WRITE, requester, tool, tool_def

pytestmark = pytest.mark.django_db

ARGS = {"disk": "sdb", "force": True}


def wipe(arguments: dict[str, Any] | None = None) -> Call:
    """A call to the destructive `ops__wipe`, from an agent, waiting for approval."""
    call = actions.start_call("ops__wipe", dict(ARGS) if arguments is None else arguments, requester(name="deploy-bot"))
    assert call.status == Call.WAITING
    return call


def reload(call: Call) -> Call:
    return Call.objects.get(pk=call.pk)


def history(call: Call) -> list[str]:
    return list(call.events.values_list("kind", flat=True))


# --- approving ----------------------------------------------------------------------------------


def test_an_approval_queues_the_call_in_the_outbox(
    ops: Server, approver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    call = wipe()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        approved = actions.approve(call.pk, approver)

    assert approved.status == Call.QUEUED
    call = reload(call)
    assert (call.status, call.decided_by, call.decided_by_name) == (Call.QUEUED, approver, "april")
    assert call.decided_at is not None
    assert Action.objects.get().call_id == call.pk
    assert history(call) == ["created", "approved", "queued"]
    # The worker's wake-up and the live events (call and outbox) leave after commit.
    assert len(callbacks) == 3


def test_the_command_line_approves_in_its_own_name(ops: Server) -> None:
    call = wipe()

    actions.approve(call.pk, None, approver_name="cli")

    call = reload(call)
    assert (call.status, call.decided_by, call.decided_by_name) == (Call.QUEUED, None, "cli")


@pytest.mark.django_db(transaction=True)
def test_an_approved_destructive_call_is_delivered_by_the_outbox(mailbox: Server, approver: Any) -> None:
    call = actions.start_call("mailbox__delete", {"message_id": "msg-0001"}, requester(name="deploy-bot"))
    assert call.status == Call.WAITING

    actions.approve(call.pk, approver)
    outcome = outbox.deliver(Action.objects.get(call=call).pk, "test-worker")

    call = reload(call)
    assert outcome == "done"
    assert (call.status, call.is_error, call.attempts) == (Call.SUCCEEDED, False, 1)
    structured = call.result["structuredContent"]
    assert (structured["id"], structured["deleted"]) == ("msg-0001", True)
    assert history(call) == ["created", "approved", "queued", "succeeded"]


# --- binding ---------------------------------------------------------------------------------------


def test_the_same_arguments_in_another_order_are_still_bound(ops: Server, approver: Any) -> None:
    call = wipe({"force": True, "disk": "sdb"})

    assert actions.approve(call.pk, approver).status == Call.QUEUED
    assert call.argument_digest == actions.argument_digest({"disk": "sdb", "force": True})


def test_changed_arguments_void_the_approval(ops: Server, approver: Any) -> None:
    call = wipe()
    Call.objects.filter(pk=call.pk).update(arguments={"disk": "sda", "force": True})

    with pytest.raises(ApprovalError, match="cannot be approved: the call's arguments do not match what was asked"):
        actions.approve(call.pk, approver)

    assert reload(call).status != Call.QUEUED
    assert not Action.objects.exists()


def test_a_changed_definition_voids_the_approval_even_after_it_was_accepted_again(ops: Server, approver: Any) -> None:
    call = wipe()
    record_tools(
        ops,
        [
            tool_def("status", READ_ONLY, description="Report the status."),
            tool_def("restart", WRITE, description="Restart the service."),
            tool_def("wipe", DESTRUCTIVE, description="Erase every disk.", inputSchema={"type": "object"}),
        ],
    )
    accept_tool(tool("ops__wipe"), None)

    with pytest.raises(ApprovalError, match="the tool's definition changed since the call was made"):
        actions.approve(call.pk, approver)

    assert not Action.objects.exists()


def test_a_tool_quarantined_since_the_call_cannot_be_approved(ops: Server, approver: Any) -> None:
    call = wipe()
    record_tools(
        ops,
        [
            tool_def("status", READ_ONLY, description="Report the status."),
            tool_def("wipe", DESTRUCTIVE, description="Erase every disk."),
        ],
    )

    with pytest.raises(ApprovalError, match="the tool is quarantined since the call was made"):
        actions.approve(call.pk, approver)

    assert not Action.objects.exists()


def test_a_tool_gone_from_the_catalog_cannot_be_approved(ops: Server, approver: Any) -> None:
    call = wipe()
    record_tools(ops, [tool_def("status", READ_ONLY, description="Report the status.")])

    with pytest.raises(ApprovalError, match="the tool is gone from the catalog"):
        actions.approve(call.pk, approver)

    assert reload(call).tool is None
    assert not Action.objects.exists()


def test_a_voided_approval_finishes_the_call_as_denied_with_the_reason(ops: Server, approver: Any) -> None:
    call = wipe()
    Call.objects.filter(pk=call.pk).update(arguments={"disk": "sda"})

    with pytest.raises(ApprovalError):
        actions.approve(call.pk, approver)

    call = reload(call)
    assert call.status == Call.DENIED
    assert call.denial_reason.startswith("approval void: the call's arguments do not match what was asked")
    assert "denied" in history(call)


# --- expiry ----------------------------------------------------------------------------------------


def past_due(call: Call) -> Call:
    """Time passes: the approval request is past its expiry."""
    Call.objects.filter(pk=call.pk).update(approval_expires_at=timezone.now() - timedelta(seconds=1))
    return reload(call)


def test_an_expired_request_cannot_be_approved(ops: Server, approver: Any) -> None:
    call = past_due(wipe())

    with pytest.raises(ApprovalError, match=f"call #{call.pk} expired before it was approved"):
        actions.approve(call.pk, approver)

    assert reload(call).status != Call.QUEUED
    assert not Action.objects.exists()


def test_an_approval_attempt_after_expiry_finishes_the_call_as_expired(ops: Server, approver: Any) -> None:
    call = past_due(wipe())

    with pytest.raises(ApprovalError):
        actions.approve(call.pk, approver)

    assert reload(call).status == Call.EXPIRED


def test_expire_waiting_expires_only_requests_past_their_time(
    ops: Server, approver: Any, django_capture_on_commit_callbacks: Any
) -> None:
    late, later = past_due(wipe()), past_due(wipe({"disk": "sdc"}))
    fresh = wipe({"disk": "sdd"})
    decided = wipe({"disk": "sde"})
    actions.approve(decided.pk, approver)
    past_due(decided)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert actions.expire_waiting() == 2

    for call in (late, later):
        call = reload(call)
        assert (call.status, call.is_error) == (Call.EXPIRED, True)
        assert call.error == {"kind": "expired", "message": "Expired: nobody approved it in time"}
        assert call.denial_reason == "nobody approved it in time"
        assert call.finished_at is not None
        assert history(call) == ["created", "expired"]
    assert reload(fresh).status == Call.WAITING
    assert reload(decided).status == Call.QUEUED
    assert len(callbacks) == 2  # one live event per expired call
    assert actions.expire_waiting() == 0


def test_the_outbox_sweeper_expires_waiting_calls(ops: Server) -> None:
    call = past_due(wipe())

    assert outbox.sweep()["expired"] == 1

    assert reload(call).status == Call.EXPIRED


def test_an_expired_call_cannot_be_approved_or_denied_afterwards(ops: Server, approver: Any) -> None:
    call = past_due(wipe())
    actions.expire_waiting()

    with pytest.raises(ApprovalError, match=f"call #{call.pk} is expired, not waiting for approval"):
        actions.approve(call.pk, approver)
    with pytest.raises(ApprovalError, match="is expired, not waiting for approval"):
        actions.deny(call.pk, approver, "too late")


# --- single use ---------------------------------------------------------------------------------------


def test_an_approval_is_used_once(ops: Server, approver: Any) -> None:
    call = wipe()
    actions.approve(call.pk, approver)

    with pytest.raises(ApprovalError, match=f"call #{call.pk} is queued, not waiting for approval"):
        actions.approve(call.pk, approver)
    with pytest.raises(ApprovalError, match="is queued, not waiting for approval"):
        actions.deny(call.pk, approver, "changed my mind")

    assert Action.objects.count() == 1
    assert history(reload(call)).count("approved") == 1


def test_a_denied_call_cannot_be_approved(ops: Server, approver: Any) -> None:
    call = wipe()
    actions.deny(call.pk, approver, "not today")

    with pytest.raises(ApprovalError, match="is denied, not waiting for approval"):
        actions.approve(call.pk, approver)

    assert not Action.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_queue_the_call_only_once(ops: Server, approver: Any, admin_user: Any) -> None:
    call = wipe()
    start = threading.Barrier(2, timeout=10)
    outcomes: dict[str, str] = {}

    def decide(user: Any) -> None:
        try:
            start.wait()
            actions.approve(call.pk, user)
            outcomes[user.username] = "approved"
        except ApprovalError as exc:
            outcomes[user.username] = str(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(u,)) for u in (approver, admin_user)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(outcomes) == ["alice", "april"]
    assert sorted(outcomes.values()).count("approved") == 1
    loser = next(v for v in outcomes.values() if v != "approved")
    assert loser in (
        f"call #{call.pk} is queued, not waiting for approval",
        f"call #{call.pk} was decided by someone else",
    )
    call = reload(call)
    assert call.decided_by_name == next(name for name, v in outcomes.items() if v == "approved")
    assert Action.objects.filter(call=call).count() == 1
    assert history(call).count("approved") == 1


# --- always allow -------------------------------------------------------------------------------------


def test_approve_and_always_allow_puts_a_rule_on_record(ops: Server, approver: Any) -> None:
    call = wipe()

    actions.approve(call.pk, approver, always_allow=True)

    rule = Rule.objects.get()
    assert (rule.server_name, rule.tool_name, rule.action) == ("ops", "ops__wipe", Rule.ALLOW)
    assert (rule.created_by, rule.reason, rule.source) == (
        approver,
        "always allowed by april",
        f"approval of call #{call.pk}",
    )
    assert history(reload(call)) == ["created", "approved", "rule_created", "queued"]


def test_after_always_allow_the_next_call_goes_to_the_outbox_without_asking(ops: Server, approver: Any) -> None:
    actions.approve(wipe().pk, approver, always_allow=True)

    again = actions.start_call("ops__wipe", {"disk": "sdz"}, requester(name="deploy-bot"))

    assert (again.status, again.decision) == (Call.QUEUED, Call.OUTBOX)
    assert again.decision_reason == "destructive (allowed by a tool rule)"


def test_always_allow_replaces_an_ask_rule_for_the_tool(ops: Server, approver: Any) -> None:
    Rule.objects.create(server_name="ops", tool_name="ops__wipe", action=Rule.ASK, reason="double check")
    Rule.objects.create(server_name="ops", tool_name="", action=Rule.ASK, reason="change freeze")

    actions.approve(wipe().pk, approver, always_allow=True)

    assert Rule.objects.get(tool_name="ops__wipe").action == Rule.ALLOW
    assert Rule.objects.get(tool_name="").action == Rule.ASK
    assert actions.start_call("ops__wipe", {"disk": "sdz"}, requester()).status == Call.QUEUED
    assert actions.start_call("ops__restart", {}, requester()).status == Call.WAITING


def test_a_call_whose_tool_was_blocked_while_it_waited_cannot_be_approved(ops: Server, approver: Any) -> None:
    call = wipe()
    Rule.objects.create(server_name="ops", tool_name="ops__wipe", action=Rule.BLOCK, reason="disks are evidence now")

    with pytest.raises(ApprovalError):
        actions.approve(call.pk, approver, always_allow=True)

    assert Rule.objects.get(tool_name="ops__wipe").action == Rule.BLOCK
    assert not Action.objects.exists()


# --- denying -------------------------------------------------------------------------------------------


def test_the_denial_reason_reaches_the_caller_as_a_tool_error(ops: Server, approver: Any) -> None:
    call = wipe()

    actions.deny(call.pk, approver, "  Not during business hours.  ")

    call = reload(call)
    assert (call.status, call.is_error) == (Call.DENIED, True)
    assert call.error == {"kind": "denied", "message": "Denied: Not during business hours."}
    assert (call.denial_reason, call.decided_by, call.decided_by_name) == (
        "Not during business hours.",
        approver,
        "april",
    )
    summary = call.summary()
    assert (summary["status"], summary["is_error"], summary["denial_reason"]) == (
        "denied",
        True,
        "Not during business hours.",
    )
    assert history(call) == ["created", "denied"]
    assert call.events.get(kind="denied").detail == {"reason": "Not during business hours."}
    assert not Action.objects.exists()


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_denial_needs_a_reason(ops: Server, approver: Any, reason: str) -> None:
    call = wipe()

    with pytest.raises(ApprovalError, match="a denial needs a reason: the caller receives it"):
        actions.deny(call.pk, approver, reason)

    assert reload(call).status == Call.WAITING


def test_deciding_an_unknown_call_raises_does_not_exist(approver: Any) -> None:
    with pytest.raises(Call.DoesNotExist):
        actions.approve(999, approver)
    with pytest.raises(Call.DoesNotExist):
        actions.deny(999, approver, "no")
