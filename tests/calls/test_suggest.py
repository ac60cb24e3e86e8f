"""Suggestions for approvers (hostapp/calls/suggest.py): the verdict the costs make of a
probability, failing closed, learning from a synthetic history of answers, and where the
suggestion is shown (Pending page, call page, API, `mcp calls --json`)."""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

import mcp_types as types
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from hostapp.calls import actions, suggest
from hostapp.calls.models import ApprovalCost, Call
from hostapp.calls.suggest import ALLOW, ASK, BLOCK, Costs
from tests.calls.test_agent_read_lane import Agent
from tests.catalog.conftest import listed, make_server, tool_def

pytestmark = pytest.mark.django_db

REQUESTER = actions.Requester(Call.CLI, "cli")


def answered(tool: str, approval: str, arguments: dict[str, Any], requester: str = "bot") -> Call:
    """A past call of `tool` that a person approved or denied."""
    return Call.objects.create(
        requester_kind=Call.AGENT,
        requester_name=requester,
        server_name=tool.split("__")[0],
        tool_name=tool,
        original_name=tool.split("__")[1],
        tool_class="destructive",
        definition_hash="h",
        arguments=arguments,
        argument_digest="d",
        decision=Call.ASK,
        status=Call.SUCCEEDED if approval == Call.APPROVED else Call.DENIED,
        approval=approval,
        decided_at="2026-12-01T10:00:00Z",
    )


def waiting(tool: str, arguments: dict[str, Any], requester: str = "bot") -> Call:
    return Call(
        requester_name=requester,
        server_name=tool.split("__")[0],
        tool_name=tool,
        tool_class="destructive",
        arguments=arguments,
    )


# --- from costs to a verdict ----------------------------------------------------------------------


def test_the_verdict_is_the_cheapest_action_and_a_tie_asks() -> None:
    costs = Costs(wrong_allow=10, wrong_block=5, ask=1)
    # Allow when (1 - p) * 10 < 1 and < p * 5: above 0.9. Block when p * 5 < 1: below 0.2.
    assert (costs.allow_above, costs.block_below) == (pytest.approx(0.9), pytest.approx(0.2))
    assert costs.verdict(0.95) == ALLOW
    assert costs.verdict(0.9) == ASK  # (1 - 0.9) * 10 == 1: a tie with asking
    assert costs.verdict(0.5) == ASK
    assert costs.verdict(0.2) == ASK  # 0.2 * 5 == 1: a tie
    assert costs.verdict(0.1) == BLOCK
    # Asking dearer than either mistake: never ask, whichever mistake costs less expected.
    pricey = Costs(wrong_allow=2, wrong_block=2, ask=5)
    assert (pricey.verdict(0.6), pricey.verdict(0.4), pricey.verdict(0.5)) == (ALLOW, BLOCK, ASK)
    assert pricey.allow_above == pytest.approx(0.5) and pricey.block_below == pytest.approx(0.5)
    # Every probability on a fine grid agrees with the thresholds.
    for cents in range(101):
        p = cents / 100
        expected = ALLOW if p > costs.allow_above + 1e-9 else BLOCK if p < costs.block_below - 1e-9 else None
        if expected is not None:
            assert costs.verdict(p) == expected, p


def test_the_most_specific_costs_win() -> None:
    ApprovalCost.objects.create(wrong_allow=7, wrong_block=7, ask=1)
    ApprovalCost.objects.create(tool_class="destructive", wrong_allow=30, wrong_block=3, ask=1)
    ApprovalCost.objects.create(server_name="mail", wrong_allow=40, wrong_block=4, ask=1)
    ApprovalCost.objects.create(server_name="mail", tool_name="mail__send", wrong_allow=90, wrong_block=9, ask=1)
    assert suggest.costs_for("mail", "mail__send", "destructive").wrong_allow == 90
    assert suggest.costs_for("mail", "mail__read", "destructive").wrong_allow == 40
    assert suggest.costs_for("files", "files__rm", "destructive").wrong_allow == 30
    assert suggest.costs_for("files", "files__write", "write").wrong_allow == 7
    ApprovalCost.objects.all().delete()
    assert suggest.costs_for("files", "files__write", "write") == Costs(10.0, 5.0, 1.0, "built in (write)")


# --- fail closed -----------------------------------------------------------------------------------


def test_a_prediction_that_errs_says_ask() -> None:
    def broken(call: Call, costs: Costs) -> suggest.Suggestion:
        raise RuntimeError("the model is gone")

    made = suggest.suggest(waiting("mail__send", {"to": "a@example.com"}), predictor=broken)
    assert made.verdict == ASK and made.probability is None
    assert made.reason == "the prediction failed (RuntimeError): ask"


def test_a_prediction_over_its_limit_says_ask_even_when_it_would_allow(settings: Any) -> None:
    settings.PATCHBAY_SUGGEST_LIMIT = 0.05

    def slow(call: Call, costs: Costs) -> suggest.Suggestion:
        time.sleep(0.1)
        return suggest.Suggestion(ALLOW, 0.999, 50.0, 50)

    made = suggest.suggest(waiting("mail__send", {}), predictor=slow)
    assert made.verdict == ASK and made.probability == 0.999
    assert made.reason.startswith("the prediction took ") and made.reason.endswith("over its limit of 50 ms: ask")
    settings.PATCHBAY_SUGGEST_LIMIT = 5.0
    assert suggest.suggest(waiting("mail__send", {}), predictor=slow).verdict == ALLOW


# --- learning from the answers people gave -----------------------------------------------------------


@pytest.fixture
def history() -> None:
    """Approvals of one tool; denials of another whenever one argument has one value."""
    for i in range(60):
        answered("files__archive", Call.APPROVED, {"path": f"/reports/{i}.pdf"})
    for i in range(10):
        answered("mail__send", Call.REFUSED_BY_PERSON, {"to": "everyone@corp.example", "subject": f"d{i}"})
        answered("mail__send", Call.APPROVED, {"to": "ann@corp.example", "subject": f"a{i}"})


def test_approvals_of_a_tool_lead_towards_allow(history: None) -> None:
    made = suggest.suggest(waiting("files__archive", {"path": "/reports/new.pdf"}))
    assert made.probability is not None and made.probability > 0.98
    assert made.verdict == ALLOW, made  # 50 for a wrong allow: above 0.98 takes this much history
    assert len(made.basis) == suggest.BASIS_SHOWN and {b.approval for b in made.basis} == {Call.APPROVED}


def test_denials_with_one_argument_value_lead_calls_with_that_value_towards_block(history: None) -> None:
    bad = suggest.suggest(waiting("mail__send", {"to": "everyone@corp.example", "subject": "hello"}))
    good = suggest.suggest(waiting("mail__send", {"to": "ann@corp.example", "subject": "hello"}))
    assert bad.probability is not None and good.probability is not None
    assert bad.probability < 0.2 < 0.8 < good.probability
    assert bad.verdict == BLOCK
    # The heaviest answers it rests on are the denials of calls to that address.
    assert {b.approval for b in bad.basis} == {Call.REFUSED_BY_PERSON}
    denied = set(Call.objects.filter(approval=Call.REFUSED_BY_PERSON).values_list("pk", flat=True))
    assert {b.call_id for b in bad.basis} <= denied


def test_an_unseen_tool_or_too_little_history_says_ask(history: None) -> None:
    unseen = suggest.suggest(waiting("calendar__delete", {"event_id": "e1"}))
    assert unseen.verdict == ASK and unseen.reason == "no past answers" and unseen.probability == 0.5
    answered("tasks__delete", Call.APPROVED, {"task_id": "t1"})
    thin = suggest.suggest(waiting("tasks__delete", {"task_id": "t1"}))
    assert thin.verdict == ASK and thin.reason.startswith("too little history: 1.0 of 3 needed")


def test_a_new_value_of_a_telling_field_is_asked_about(history: None) -> None:
    stranger = suggest.suggest(waiting("mail__send", {"to": "stranger@elsewhere.example", "subject": "hi"}))
    assert stranger.verdict == ASK and stranger.reason.startswith("too little history")
    assert suggest.free_fields(suggest.history("mail__send")) == {"subject"}  # `to` tells; the subject does not


def test_features_name_the_requester_the_fields_and_short_values() -> None:
    found = suggest.features({"to": "a@b", "n": 3, "opts": {"cc": True}, "body": "x" * 500}, "bot")
    assert found == {
        "by:bot",
        "k:to",
        "v:to=a@b",
        "k:n",
        "v:n=3",
        "k:opts",
        "k:opts.cc",
        "v:opts.cc=true",
        "k:body",  # too long to be a value: the field only
    }


# --- on record, and shown ------------------------------------------------------------------------------


@pytest.fixture
def mail() -> None:
    listed(make_server("mail", trusted=True), tool_def("send", "Send an email"))


def test_a_waiting_call_keeps_its_suggestion_and_the_answer_is_learned(mail: None, admin_user: Any) -> None:
    for i in range(4):
        answered("mail__send", Call.APPROVED, {"to": "ann@corp.example", "subject": f"s{i}"}, requester="cli")
    call = actions.start_call("mail__send", {"to": "ann@corp.example", "subject": "s9"}, REQUESTER)
    assert call.status == Call.WAITING
    stored = Call.objects.get(pk=call.pk).suggestion
    assert stored["verdict"] in (ALLOW, ASK) and stored["probability"] > 0.7 and len(stored["basis"]) == 4

    actions.approve(call.pk, admin_user)
    assert Call.objects.get(pk=call.pk).approval == Call.APPROVED
    other = actions.start_call("mail__send", {"to": "x@y"}, REQUESTER)
    actions.deny(other.pk, admin_user, "not to strangers")
    assert Call.objects.get(pk=other.pk).approval == Call.REFUSED_BY_PERSON
    assert {b[0] for b in suggest.history("mail__send")} >= {call.pk, other.pk}


def test_the_pending_page_the_call_page_the_api_and_the_cli_show_it(mail: None, admin_client: Client) -> None:
    past = [answered("mail__send", Call.APPROVED, {"to": "ann@corp.example"}, requester="cli") for _ in range(4)]
    call = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)

    for url in (reverse("pending"), reverse("call", args=[call.pk])):
        page = admin_client.get(url).content.decode()
        assert 'class="suggestion verdict-' in page, url
        assert '<span class="probability">' in page and "It rests on" in page
        assert f'href="{reverse("call", args=[past[-1].pk])}"' in page

    api = admin_client.get(f"/api/v1/calls/{call.pk}").json()
    assert api["suggestion"]["verdict"] in (ALLOW, ASK) and len(api["suggestion"]["basis"]) == 4
    assert {b["approval"] for b in api["suggestion"]["basis"]} == {"approved"}
    out = StringIO()
    call_command("mcp", "calls", "--json", "--status", "waiting", stdout=out)
    row = next(r for r in json.loads(out.getvalue()) if r["call_id"] == call.pk)
    assert row["suggestion"] == api["suggestion"]


# --- how good they are -------------------------------------------------------------------------------------


def test_calibration_bins_and_the_brier_score() -> None:
    pairs = [("t", 0.9, True)] * 9 + [("t", 0.9, False)] + [("u", 0.2, False)] * 4 + [("u", 0.2, True)]
    measured = suggest.calibration(pairs)
    assert measured.count == 15
    top = measured.bins[9]
    assert (top.count, top.predicted, top.observed) == (10, pytest.approx(0.9), pytest.approx(0.9))
    low = measured.bins[2]
    assert (low.count, low.predicted, low.observed) == (5, pytest.approx(0.2), pytest.approx(0.2))
    brier = (9 * 0.01 + 0.81 + 4 * 0.04 + 0.64) / 15
    assert measured.brier == pytest.approx(brier)
    assert measured.tools == []  # none has 20 answers
    assert suggest.calibration([]).brier is None


def test_the_suggestions_page_shows_thresholds_and_calibration(mail: None, admin_client: Client) -> None:
    ApprovalCost.objects.create(server_name="mail", tool_name="mail__send", wrong_allow=10, wrong_block=5, ask=1)
    empty = admin_client.get(reverse("suggestions")).content.decode()
    assert "No answer has been given to a call with a suggestion yet." in empty
    assert "<td>mail__send</td><td>10.0</td><td>5.0</td><td>1.0</td><td>90%</td><td>20%</td>" in empty

    call = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    actions.deny(call.pk, type("Person", (), {"pk": None, "get_username": lambda self: "cli"})(), "no")
    page = admin_client.get(reverse("suggestions")).content.decode()
    assert 'id="brier">0.250<' in page  # one half given, and a denial: (0.5 - 0)^2


# --- acting on the verdict (an admin's opt-in) ---------------------------------------------------------


def _approvals(n: int, **arguments: Any) -> None:
    for _ in range(n):
        answered("mail__send", Call.APPROVED, {"to": "ann@corp.example", **arguments}, requester="cli")


def test_without_the_opt_in_a_confident_suggestion_still_waits_for_a_person(mail: None) -> None:
    _approvals(60)
    call = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    assert call.status == Call.WAITING and call.suggestion["verdict"] == ALLOW and not call.suggestion["acts"]


def test_with_the_opt_in_the_host_allows_on_record_and_does_not_learn_from_it(mail: None) -> None:
    ApprovalCost.objects.create(server_name="mail", wrong_allow=50, wrong_block=5, ask=1, act=True)
    _approvals(60)
    call = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)

    assert call.status == Call.QUEUED and call.decided_by_suggestion and call.decided_by_name == "suggestion"
    assert call.approval == ""  # not a person's answer: not learned from, not scored
    event = call.events.get(kind="approved")
    assert event.actor == "suggestion" and event.detail["probability"] > 0.98 and len(event.detail["basis"]) == 5
    assert call.pk not in {row[0] for row in suggest.history("mail__send")}


def test_a_destructive_tool_is_acted_on_only_after_enough_answers(mail: None, settings: Any) -> None:
    settings.PATCHBAY_AUTO_DECIDE_MIN_ANSWERS = 20
    ApprovalCost.objects.create(
        server_name="mail", tool_name="mail__send", wrong_allow=2, wrong_block=5, ask=1, act=True
    )
    _approvals(10)
    early = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    assert early.status == Call.WAITING and early.suggestion["verdict"] == ALLOW and not early.suggestion["acts"]
    _approvals(10)
    later = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    assert later.status == Call.QUEUED and later.decided_by_suggestion


def test_a_denial_on_a_suggestion_tells_the_agent_a_person_may_approve_and_is_reversible(
    mail: None, admin_user: Any, admin_client: Client
) -> None:
    ApprovalCost.objects.create(server_name="mail", wrong_allow=50, wrong_block=5, ask=1, act=True)
    for _ in range(20):
        answered("mail__send", Call.REFUSED_BY_PERSON, {"to": "everyone@corp.example"}, requester="cli")
    call = actions.start_call("mail__send", {"to": "everyone@corp.example"}, REQUESTER)
    assert call.status == Call.DENIED, (call.denial_reason, call.suggestion)
    assert call.decided_by_suggestion and call.approval == "", call.denial_reason
    assert f"A person may still approve it: ask one to reopen call #{call.pk} on Patchbay" in call.denial_reason

    page = admin_client.get(reverse("call", args=[call.pk])).content.decode()
    assert "Decided by the host on its suggestion: block" in page and "Reopen for a person" in page
    admin_client.post(reverse("call_reopen", args=[call.pk]))
    reopened = Call.objects.get(pk=call.pk)
    assert reopened.status == Call.WAITING and not reopened.decided_by_suggestion and reopened.denial_reason == ""
    actions.approve(call.pk, admin_user)
    assert Call.objects.get(pk=call.pk).approval == Call.APPROVED  # a person's answer: learned from
    # A person's own denial is not reopened.
    other = actions.start_call("mail__send", {"to": "someone-new@elsewhere.example"}, REQUESTER)
    assert other.status == Call.WAITING and other.suggestion["verdict"] == ASK  # a new address: too little history
    actions.deny(other.pk, admin_user, "no")
    with pytest.raises(actions.ApprovalError, match="was not denied on a suggestion"):
        actions.reopen(other.pk, admin_user)


def test_only_a_tool_or_a_server_may_let_the_host_act() -> None:
    with pytest.raises(ValidationError, match="only a tool's or a server's costs"):
        ApprovalCost(tool_class="destructive", wrong_allow=1, wrong_block=1, ask=1, act=True).full_clean()
    row = ApprovalCost(tool_name="mail__send", wrong_allow=1, wrong_block=1, ask=1, act=True)
    row.full_clean()
    assert row.server_name == "mail"


def test_when_acting_on_the_suggestion_fails_the_call_waits_for_a_person(mail: None, monkeypatch: Any) -> None:
    ApprovalCost.objects.create(server_name="mail", wrong_allow=50, wrong_block=5, ask=1, act=True)
    _approvals(60)
    told: list[int] = []
    monkeypatch.setattr(actions.notify, "call_waiting", lambda call: told.append(call.pk))

    def broken(*args: Any, **kw: Any) -> Call:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(actions, "approve", broken)
    call = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    assert call.status == Call.WAITING and told == [call.pk]  # no error to the caller: a person decides

    def finished_meanwhile(call_id: int, *args: Any, **kw: Any) -> Call:
        Call.objects.filter(pk=call_id).update(status=Call.BLOCKED)
        raise actions.ApprovalError("cannot be approved: blocked")

    monkeypatch.setattr(actions, "approve", finished_meanwhile)
    other = actions.start_call("mail__send", {"to": "ann@corp.example"}, REQUESTER)
    assert other.status == Call.BLOCKED and told == [call.pk]  # as it is now, and nobody told of it


@pytest.mark.django_db(transaction=True)
def test_an_agent_denied_on_a_suggestion_is_told_to_ask_a_person_and_hears_the_reversal(
    mail: None, admin_user: Any, settings: Any
) -> None:
    """Through the agents' endpoint (its handler, as the SDK calls it): the denial is a tool
    error the agent can act on; a person reopens and approves; the status tool says so."""
    settings.PATCHBAY_AGENT_WRITE_WAIT = 0  # approved, it is queued (no worker here)
    ApprovalCost.objects.create(server_name="mail", wrong_allow=50, wrong_block=5, ask=1, act=True)
    for _ in range(20):
        answered("mail__send", Call.REFUSED_BY_PERSON, {"to": "everyone@corp.example"}, requester="bot")
    agent = Agent("bot")
    try:
        denied = agent.call("mail__send", {"to": "everyone@corp.example"})
        call = Call.objects.get(tool_name="mail__send", requester_agent_id=agent.pk)
        assert call.status == Call.DENIED and call.decided_by_suggestion
        text = " ".join(c.text for c in denied.content if isinstance(c, types.TextContent))
        assert denied.is_error and f"Call #{call.pk} was denied by suggestion" in text
        assert f"ask one to reopen call #{call.pk} on Patchbay, then ask for its status" in text

        actions.reopen(call.pk, admin_user)
        actions.approve(call.pk, admin_user)
        status = agent.call("patchbay__call_status", {"call_id": call.pk})
        assert status.structured_content == {"call_id": call.pk, "tool": "mail__send", "status": Call.QUEUED}
    finally:
        agent.close()
