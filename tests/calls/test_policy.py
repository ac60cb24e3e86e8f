"""The policy (`hostapp.calls.policy.decide`) and how `start_call` acts on it.

The matrix: a trusted or untrusted server, x the tool's annotations, x no rule or an
allow/ask/block rule for the tool or for the whole server.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from hostapp.calls import actions
from hostapp.calls.models import Call, Rule
from hostapp.calls.policy import decide
from hostapp.catalog.actions import accept_tool, record_tools, set_class_override, set_enabled
from hostapp.catalog.models import Tool
from hostapp.outbox.models import Action

from .conftest import DESTRUCTIVE, READ_ONLY, WRITE, catalog, requester, tool, tool_def

pytestmark = pytest.mark.django_db

ANNOTATIONS: dict[str, dict[str, Any] | None] = {
    "read-only": READ_ONLY,
    "write": WRITE,
    "destructive": DESTRUCTIVE,
    # No annotations: the spec's defaults say destructive.
    "none": None,
}
# The class the host acts on: annotations believed only from a trusted server.
CLASS_IF_TRUSTED = {"read-only": "read_only", "write": "write", "destructive": "destructive", "none": "destructive"}
RULES = [
    None,
    ("tool", "allow"),
    ("tool", "ask"),
    ("tool", "block"),
    ("server", "allow"),
    ("server", "ask"),
    ("server", "block"),
]


def expected(cls: str, rule: tuple[str, str] | None) -> str:
    action = rule[1] if rule else None
    if action == "block":
        return Call.REFUSE
    if action == "ask":
        return Call.ASK
    if cls == "read_only":
        return Call.RUN
    if cls == "write" or action == "allow":
        return Call.OUTBOX
    return Call.ASK


def rule_id(rule: tuple[str, str] | None) -> str:
    return "no-rule" if rule is None else f"{rule[0]}-{rule[1]}"


@pytest.mark.parametrize("rule", RULES, ids=rule_id)
@pytest.mark.parametrize("annotations", list(ANNOTATIONS))
@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_it_decides_by_trust_annotations_and_rules(
    trusted: bool, annotations: str, rule: tuple[str, str] | None
) -> None:
    catalog("box", tool_def("act", ANNOTATIONS[annotations]), trusted=trusted)
    t = tool("box__act")
    if not trusted:
        # New tools of an untrusted server are quarantined until a person accepts them.
        accept_tool(t, None)
    if rule is not None:
        scope, action = rule
        Rule.objects.create(
            server_name="box",
            tool_name="box__act" if scope == "tool" else "",
            action=action,
            reason=f"{scope} says {action}",
        )
    cls = CLASS_IF_TRUSTED[annotations] if trusted else "destructive"

    decision = decide(tool("box__act"))

    assert tool("box__act").effective_class == cls
    assert decision.kind == expected(cls, rule)
    if rule is not None and rule[1] in ("ask", "block"):
        assert decision.reason == f"{rule[0]} says {rule[1]}"
    if rule is not None:
        assert decision.rule is not None and decision.rule.action == rule[1]


# --- rules --------------------------------------------------------------------------------


def test_a_tool_rule_wins_over_a_server_rule() -> None:
    catalog("box", tool_def("read", READ_ONLY), tool_def("drop", DESTRUCTIVE))
    Rule.objects.create(server_name="box", tool_name="", action=Rule.BLOCK, reason="box is frozen")
    Rule.objects.create(server_name="box", tool_name="box__drop", action=Rule.ALLOW)

    assert decide(tool("box__drop")).kind == Call.OUTBOX
    assert (decide(tool("box__read")).kind, decide(tool("box__read")).reason) == (Call.REFUSE, "box is frozen")


def test_a_tool_block_rule_wins_over_a_server_allow_rule() -> None:
    catalog("box", tool_def("read", READ_ONLY))
    Rule.objects.create(server_name="box", tool_name="", action=Rule.ALLOW)
    Rule.objects.create(server_name="box", tool_name="box__read", action=Rule.BLOCK, reason="leaks secrets")

    assert (decide(tool("box__read")).kind, decide(tool("box__read")).reason) == (Call.REFUSE, "leaks secrets")


def test_rules_of_other_servers_and_other_tools_do_not_apply() -> None:
    catalog("box", tool_def("read", READ_ONLY))
    catalog("crate", tool_def("read", READ_ONLY))
    Rule.objects.create(server_name="crate", tool_name="", action=Rule.BLOCK)
    Rule.objects.create(server_name="box", tool_name="box__other", action=Rule.BLOCK)

    assert decide(tool("box__read")).kind == Call.RUN


@pytest.mark.parametrize(
    ("scope", "reason"), [("box__read", "blocked by a tool rule"), ("", "blocked by a server rule")]
)
def test_a_block_rule_without_a_reason_says_which_rule_blocked(scope: str, reason: str) -> None:
    catalog("box", tool_def("read", READ_ONLY))
    Rule.objects.create(server_name="box", tool_name=scope, action=Rule.BLOCK)

    assert decide(tool("box__read")).reason == reason


def test_an_admins_class_override_beats_the_annotations() -> None:
    catalog("box", tool_def("peek", DESTRUCTIVE), trusted=False)
    accept_tool(tool("box__peek"), None)
    set_class_override(tool("box__peek"), "read_only")

    assert decide(tool("box__peek")).kind == Call.RUN


# --- never called -----------------------------------------------------------------------------


def test_a_new_tool_of_an_untrusted_server_is_refused_even_with_an_allow_rule() -> None:
    catalog("box", tool_def("read", READ_ONLY), trusted=False)
    Rule.objects.create(server_name="box", tool_name="box__read", action=Rule.ALLOW)

    decision = decide(tool("box__read"))

    assert decision.kind == Call.REFUSE
    assert decision.reason == "box__read is quarantined: it is new and not reviewed yet; a person must review it first"


def test_a_tool_that_changed_since_it_was_accepted_is_refused() -> None:
    server = catalog("box", tool_def("read", READ_ONLY))
    record_tools(server, [tool_def("read", READ_ONLY, description="Now also sends your files away.")])

    decision = decide(tool("box__read"))

    assert tool("box__read").status == Tool.QUARANTINED
    assert decision.kind == Call.REFUSE
    assert "it changed since it was accepted" in decision.reason


def test_a_tool_of_a_disabled_server_is_refused() -> None:
    server = catalog("box", tool_def("read", READ_ONLY))
    set_enabled(server, False)

    assert (decide(tool("box__read")).kind, decide(tool("box__read")).reason) == (
        Call.REFUSE,
        "the server box is disabled",
    )


# --- start_call acts on the decision -------------------------------------------------------------


def test_a_blocked_call_is_recorded_and_refused_with_the_rules_reason() -> None:
    catalog("box", tool_def("drop", DESTRUCTIVE))
    Rule.objects.create(server_name="box", tool_name="box__drop", action=Rule.BLOCK, reason="Use the console.")

    call = actions.start_call("box__drop", {}, requester())

    call.refresh_from_db()
    assert call.status == Call.BLOCKED
    assert call.decision == Call.REFUSE
    assert call.is_error is True
    assert call.error == {"kind": "policy", "message": "Use the console."}
    assert call.finished_at is not None
    assert not Action.objects.exists()
    assert list(call.events.values_list("kind", flat=True)) == ["created"]


def test_a_write_call_goes_to_the_outbox_in_the_same_transaction(ops: Any) -> None:
    call = actions.start_call("ops__restart", {}, requester())

    call.refresh_from_db()
    assert (call.status, call.decision, call.approval_expires_at) == (Call.QUEUED, Call.OUTBOX, None)
    assert Action.objects.get().call_id == call.pk
    assert list(call.events.values_list("kind", flat=True)) == ["created", "queued"]


def test_a_destructive_call_waits_for_approval_for_the_configured_time(ops: Any) -> None:
    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    call.refresh_from_db()
    assert (call.status, call.decision) == (Call.WAITING, Call.ASK)
    assert call.decision_reason == "destructive tools need a person's approval"
    assert settings.PATCHBAY_APPROVAL_TTL == 15 * 60
    assert (call.approval_expires_at - call.created_at).total_seconds() == pytest.approx(15 * 60, abs=2)
    assert not Action.objects.exists()


def test_the_approval_time_follows_the_setting(ops: Any, settings: Any) -> None:
    settings.PATCHBAY_APPROVAL_TTL = 60

    call = actions.start_call("ops__wipe", {"disk": "sdb"}, requester())

    assert (call.approval_expires_at - call.created_at).total_seconds() == pytest.approx(60, abs=2)


def test_an_ask_rule_holds_even_a_write_call_for_approval(ops: Any) -> None:
    Rule.objects.create(server_name="ops", tool_name="", action=Rule.ASK, reason="change freeze")

    call = actions.start_call("ops__restart", {}, requester())

    assert (call.status, call.decision_reason) == (Call.WAITING, "change freeze")


def test_the_ledger_row_pins_the_tool_and_the_arguments(ops: Any, plain_user: Any) -> None:
    call = actions.start_call("ops__wipe", {"force": True, "disk": "sdb"}, requester(plain_user))

    call.refresh_from_db()
    t = tool("ops__wipe")
    assert (call.server_name, call.tool_name, call.original_name, call.tool_id) == ("ops", "ops__wipe", "wipe", t.pk)
    assert (call.tool_class, call.definition_hash) == ("destructive", t.definition_hash)
    assert call.argument_digest == actions.argument_digest({"disk": "sdb", "force": True})
    assert (call.requester_kind, call.requester_name, call.requester_user) == (Call.USER, "olivia", plain_user)


def test_invalid_arguments_are_refused_with_the_fields_path_before_anything_is_recorded(ops: Any) -> None:
    with pytest.raises(actions.CallError) as caught:
        actions.start_call("ops__wipe", {"disk": 7}, requester())

    assert caught.value.status == 400
    assert caught.value.message == "invalid arguments at disk: 7 is not of type 'string'"
    assert caught.value.errors == [{"path": "disk", "message": "7 is not of type 'string'"}]
    assert not Call.objects.exists()


def test_a_call_to_an_unknown_tool_is_a_404(ops: Any) -> None:
    with pytest.raises(actions.CallError) as caught:
        actions.start_call("ops__nothing", {}, requester())

    assert (caught.value.status, caught.value.message) == (404, "no tool named 'ops__nothing'")
