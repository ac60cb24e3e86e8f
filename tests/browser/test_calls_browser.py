"""Calls in a real browser (issue "calls"): the generated form, the confirmation dialog,
approval and denial from a second person's browser, and the caller's page updating live."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.host import RunningHost

pytestmark = [pytest.mark.browser, pytest.mark.slow]

APPROVER = ("avery", "avery-approves-9")
REQUESTER = ("riley", "riley-asks-3")
# Two plain users (see conftest.host): one who may approve calls, one who may only make them.
USERS = [(*APPROVER, ["calls.approve_call"]), (*REQUESTER, [])]
CALL_URL = re.compile(r"^/calls/(\d+)/$")


def call_id(page: Page) -> int:
    """The call just made from the tool page: it shows under the form, with a link to its page."""
    link = page.locator("#call-outcome-link")
    expect(link).to_be_visible()
    expect(link).to_have_attribute("href", CALL_URL)
    found = CALL_URL.search(link.get_attribute("href") or "")
    assert found
    return int(found.group(1))


def live(page: Page) -> None:
    """The page's websocket is up, and we can tell later that the page was never reloaded."""
    expect(page.locator("html")).to_have_attribute("data-live", "connected")
    page.evaluate("window.__same_page = true")


def not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__same_page") is True, "the page was reloaded"


def ask_to_delete(page: Page, message_id: str, own_approval: bool = False) -> int:
    """Fill mailbox__delete's form, check the confirmation dialog, confirm; the call's id.
    `own_approval`: the caller may approve calls (they see the form on their own call)."""
    page.goto("/catalog/mailbox__delete/")
    expect(page.locator("#call-form")).to_have_attribute("data-confirm", "1")
    field = page.locator("#call-fields").get_by_label("Message Id", exact=True)
    field.fill(message_id)
    field.blur()
    page.get_by_role("button", name="Ask to call").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading", name="Call mailbox__delete?")).to_be_visible()
    expect(dialog).to_contain_text("This tool is destructive.")
    arguments = dialog.locator("pre")
    expect(arguments).to_have_text(json.dumps({"message_id": message_id}, indent=2))
    dialog.get_by_role("button", name="Yes, ask for approval").click()
    pk = call_id(page)
    expect(page.locator("#call-status")).to_have_text("waiting for approval")
    expect(page.get_by_role("heading", name="Waiting for approval")).to_be_visible()
    expect(page.locator("#call-arguments")).to_have_text(json.dumps({"message_id": message_id}, indent=2))
    if not own_approval:  # The caller (without the approve permission) cannot decide it.
        expect(page.locator(".decide")).to_have_count(0)
    return pk


def test_a_read_only_tool_is_called_through_the_generated_form(login: Callable[..., Page]) -> None:
    page = login(*REQUESTER)
    page.goto("/catalog/mailbox__search/")
    expect(page.get_by_text("Read-only: it runs at once.")).to_be_visible()
    form = page.locator("#call-form")
    expect(form).to_have_attribute("data-confirm", "0")
    query = form.get_by_label("Query", exact=True)
    expect(query).to_be_visible()
    query.fill("invoice")
    form.get_by_role("button", name="Call", exact=True).click()

    call_id(page)
    expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#call-status")).to_have_text("succeeded")
    assert json.loads(page.locator("#call-arguments").text_content() or "")["query"] == "invoice"
    result = page.locator("#call-result")
    expect(result).to_contain_text("Your invoice INV-20417 is ready")
    expect(result).to_contain_text("Shipment 88213 delayed at customs")
    expect(result).not_to_contain_text("Lunch on Friday?")
    expect(result.get_by_text("matches the output schema")).to_be_visible()
    expect(page.locator("dl.facts")).to_contain_text("riley (user)")


def test_a_destructive_call_is_confirmed_approved_by_another_person_and_updates_live(
    login: Callable[..., Page],
) -> None:
    approver = login(*APPROVER)
    approver.goto("/calls/pending/")
    expect(approver.get_by_text("Nothing is waiting for approval.")).to_be_visible()
    expect(approver.locator("#nav-pending")).to_be_hidden()
    live(approver)

    requester = login(*REQUESTER)
    pk = ask_to_delete(requester, "msg-0001")
    live(requester)

    # The approver's open Pending page lists the call, and the badge counts it, without a reload.
    card = approver.locator(f'article.pending-call[data-call="{pk}"]')
    expect(card).to_be_visible()
    expect(card.get_by_role("heading")).to_contain_text(f"#{pk} mailbox__delete")
    expect(card.locator("pre.arguments")).to_have_text(json.dumps({"message_id": "msg-0001"}, indent=2))
    expect(card).to_contain_text("Asked by riley")
    expect(approver.locator("#nav-pending")).to_be_visible()
    expect(approver.locator("#nav-pending")).to_have_text("1")
    not_reloaded(approver)

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(approver.get_by_text(f"Approved call #{pk}.")).to_be_visible()
    expect(approver.locator(f'article.pending-call[data-call="{pk}"]')).to_have_count(0)
    expect(approver.locator("#nav-pending")).to_be_hidden()

    # The caller's page follows on its own: approved, delivered by the worker, succeeded.
    status = requester.locator("#call-status")
    expect(status).to_have_attribute("data-status", "succeeded")
    expect(status).to_have_text("succeeded")
    expect(requester.get_by_role("heading", name="Waiting for approval")).to_have_count(0)
    expect(requester.locator("#call-result")).to_contain_text('"deleted": true')
    expect(requester.locator("#call-result")).to_contain_text("Q3 budget review moved to Thursday")
    expect(requester.locator("dl.facts")).to_contain_text("Decided by")
    expect(requester.locator("dl.facts")).to_contain_text("avery")
    expect(requester.locator("ol.history")).to_contain_text("approved by avery")
    not_reloaded(requester)


def test_a_denied_call_shows_the_reason_on_the_callers_page_live(login: Callable[..., Page]) -> None:
    requester = login(*REQUESTER)
    pk = ask_to_delete(requester, "msg-0002")
    live(requester)

    approver = login(*APPROVER)
    approver.goto("/calls/pending/")
    expect(approver.locator("#nav-pending")).to_have_text("1")
    card = approver.locator(f'article.pending-call[data-call="{pk}"]')
    expect(card.locator("pre.arguments")).to_contain_text("msg-0002")
    reason = "Keep invoices for the auditors: archive it instead"
    card.get_by_label("Reason for denying").fill(reason)
    card.get_by_role("button", name="Deny").click()
    expect(approver.get_by_text(f"Denied call #{pk}.")).to_be_visible()
    expect(approver.get_by_text("Nothing is waiting for approval.")).to_be_visible()

    status = requester.locator("#call-status")
    expect(status).to_have_attribute("data-status", "denied")
    denial = requester.locator("#denial-reason")
    expect(denial).to_have_text(f"Denied by avery: {reason}")
    expect(requester.get_by_role("heading", name="Waiting for approval")).to_have_count(0)
    expect(requester.locator("ol.history")).to_contain_text(f"denied by avery: {reason}")
    not_reloaded(requester)


def test_pressing_enter_after_typing_asks_with_the_typed_arguments(login: Callable[..., Page]) -> None:
    page = login(*REQUESTER)
    page.goto("/catalog/mailbox__delete/")
    field = page.locator("#call-fields").get_by_label("Message Id", exact=True)
    field.fill("msg-0003")
    field.press("Enter")
    errors = page.locator("#call-errors")
    dialog = page.get_by_role("dialog")
    # Either the dialog opens or the script shows errors, at once; no call is made either way.
    expect(page.locator("dialog#confirm-call[open], #call-errors:not([hidden])")).to_be_visible()
    assert errors.is_hidden(), f"the form reports: {errors.inner_text()!r}"
    expect(dialog.locator("pre")).to_have_text(json.dumps({"message_id": "msg-0003"}, indent=2))
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()


def test_a_double_click_makes_one_call_and_sending_the_form_again_returns_it(
    login: Callable[..., Page], host: RunningHost
) -> None:
    page = login(*REQUESTER)
    page.goto("/catalog/tasks__add/")
    expect(page.get_by_text("it goes to the outbox and is delivered by a worker")).to_be_visible()
    form = page.locator("#call-form")
    title = "Double-clicked task"
    form.get_by_label("Title", exact=True).fill(title)
    key = form.locator('input[name="submit_key"]').input_value()
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    button = page.locator("#call-submit")
    expect(button).to_have_text("Call")
    # What the button says and whether it takes clicks, at every change, from the click on.
    page.evaluate(
        """() => {
        const b = document.getElementById("call-submit");
        window.__button = [];
        new MutationObserver(() => window.__button.push([b.textContent, b.disabled]))
          .observe(b, {attributes: true, childList: true, characterData: true, subtree: true});
    }"""
    )
    button.dblclick()

    pk = call_id(page)
    # The call shows under the form, live, through to the worker's delivery; the page stays.
    expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#call-result")).to_contain_text(title)
    expect(page.locator("#call-outcome-title")).to_have_text(f"Call #{pk}: succeeded")
    expect(page).to_have_url(re.compile(r"/catalog/tasks__add/$"))
    expect(button).to_have_text("Call again")
    expect(button).to_be_enabled()
    states = page.evaluate("window.__button")
    assert ["Calling...", True] in states, states  # no click was taken while the call was on its way
    # The next submit is another call: the form has a new key.
    assert form.locator('input[name="submit_key"]').input_value() != key

    # The same form sent again (a reload of the POST, the back button): the first call answers.
    csrf = form.locator('input[name="csrfmiddlewaretoken"]').input_value()
    data = {"arguments": json.dumps({"title": title}), "submit_key": key, "csrfmiddlewaretoken": csrf}
    headers = {"Referer": f"{host.url}/catalog/tasks__add/"}
    again = page.request.post("/catalog/tasks__add/call/", form=data, headers={**headers, "Accept": "application/json"})
    assert again.ok, again.text()
    assert (again.json()["call_id"], again.json()["repeated"]) == (pk, True)
    plain = page.request.post("/catalog/tasks__add/call/", form=data, headers=headers, max_redirects=0)
    assert plain.status == 302 and plain.headers["location"] == f"/calls/{pk}/"

    # One call on record, and one task at the server.
    calls = page.request.get("/api/v1/calls", params={"tool": "tasks__add", "limit": 1000}).json()
    assert [c["call_id"] for c in calls if c["arguments"].get("title") == title] == [pk]
    with closing(sqlite3.connect(f"file:{host.data_dir / 'servers' / 'tasks.sqlite3'}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT count(*) FROM tasks WHERE title = ?", (title,)).fetchone()[0] == 1


def _ask_from_the_command_line(host: RunningHost, message_id: str) -> int:
    """`mcp call mailbox__delete` (it waits for approval: exit status 3); the call's id."""
    proc = host.start_manage(
        "mcp", "call", "mailbox__delete", "--args", json.dumps({"message_id": message_id}), "--json"
    )
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 3, (out, err)
    return int(json.loads(out)["call_id"])


def test_what_happens_between_the_render_and_the_socket_is_shown(login: Callable[..., Page], host: RunningHost) -> None:
    approver = login(*APPROVER)
    made: list[int] = []

    def in_the_window(route: Any) -> None:
        # The Pending page is rendered (no call waits), its live script not yet loaded, so
        # its socket is not open: a call starts waiting now, and no event can reach the page.
        if not made:
            made.append(_ask_from_the_command_line(host, "msg-0003"))
        route.continue_()

    approver.route("**/js/live.js*", in_the_window)
    approver.goto("/calls/pending/")
    assert made, "the live script was not requested"
    live(approver)
    # Its socket open, the page fetched its state again: the call and the badge are there.
    expect(approver.locator(f'article.pending-call[data-call="{made[0]}"]')).to_be_visible(timeout=5_000)
    expect(approver.locator("#nav-pending")).to_have_text("1", timeout=5_000)
    not_reloaded(approver)
    host.manage("mcp", "deny", str(made[0]), "--reason", "only a test")
    expect(approver.locator(f'article.pending-call[data-call="{made[0]}"]')).to_have_count(0)


def test_an_approvers_own_call_says_so_where_they_decide_it(login: Callable[..., Page]) -> None:
    approver = login(*APPROVER)
    pk = ask_to_delete(approver, "msg-0004", own_approval=True)
    decide = approver.locator(".decide")
    expect(decide.locator(".own-call")).to_contain_text("Your own call.")
    expect(decide.locator(".own-call")).to_contain_text("PATCHBAY_FOUR_EYES=1")
    approver.goto("/calls/pending/")
    card = approver.locator(f'article.pending-call[data-call="{pk}"]')
    expect(card.locator(".own-call")).to_contain_text("Your own call.")
    # The tool's name as it is, not upper-cased with the card's heading.
    name = card.get_by_role("heading").locator("code")
    expect(name).to_have_text("mailbox__delete")
    assert name.evaluate("el => getComputedStyle(el).textTransform") == "none"
    card.get_by_label("Reason for denying").fill("asked by mistake")
    card.get_by_role("button", name="Deny").click()
    expect(card).to_have_count(0)


def test_what_an_approver_types_survives_a_live_update_of_the_list(
    login: Callable[..., Page], host: RunningHost
) -> None:
    first = _ask_from_the_command_line(host, "msg-0005")
    approver = login(*APPROVER)
    approver.goto("/calls/pending/")
    live(approver)
    card = approver.locator(f'article.pending-call[data-call="{first}"]')
    reason = card.get_by_label("Reason for denying")
    reason.fill("Not this one: it is the audit")
    expect(reason).to_be_focused()

    # Another call starts waiting: the list is fetched again and put in place, live.
    second = _ask_from_the_command_line(host, "msg-0006")
    expect(approver.locator(f'article.pending-call[data-call="{second}"]')).to_be_visible()
    not_reloaded(approver)
    expect(reason).to_have_value("Not this one: it is the audit")
    expect(reason).to_be_focused()
    approver.keyboard.type(" trail")
    card.get_by_role("button", name="Deny").click()
    expect(approver.get_by_text(f"Denied call #{first}.")).to_be_visible()
    assert host.manage("mcp", "deny", str(second), "--reason", "only a test")
    calls = approver.request.get("/api/v1/calls", params={"tool": "mailbox__delete", "limit": 100}).json()
    denied = next(c for c in calls if c["call_id"] == first)
    assert denied["denial_reason"] == "Not this one: it is the audit trail"


def test_the_pending_page_shows_the_suggestion_and_the_suggestions_page_its_calibration(
    login: Callable[..., Page],
) -> None:
    """By now people answered several calls of mailbox__delete (the tests above): a new call
    rests on those answers, the latest approval first, each linked."""
    requester = login(*REQUESTER)
    approved = ask_to_delete(requester, "msg-0007")
    approver = login(*APPROVER)
    approver.goto(f"/calls/{approved}/")
    approver.get_by_role("button", name="Approve", exact=True).click()
    expect(approver.get_by_text(f"Approved call #{approved}.")).to_be_visible()

    again = ask_to_delete(requester, "msg-0007")
    approver.goto("/calls/pending/")
    suggestion = approver.locator(f'article.pending-call[data-call="{again}"] .suggestion')
    expect(suggestion).to_be_visible()
    # Approvals and denials of calls like it (message ids are new each time: they tell nothing).
    expect(suggestion).to_contain_text("Suggestion: ask")
    probability = suggestion.locator(".probability").text_content() or ""
    assert 50 < int(probability.rstrip("%")) < 100, probability
    first = suggestion.locator(".basis a").first
    expect(first).to_have_text(f"#{approved}")  # as heavy as any, and the latest
    first.click()
    expect(approver).to_have_url(re.compile(rf"/calls/{approved}/$"))

    approver.goto("/calls/pending/")
    approver.get_by_role("link", name="Suggestions: how they are made, and how good they are").click()
    expect(approver.get_by_role("heading", name="Suggestions for approvers")).to_be_visible()
    destructive = approver.locator("#cost-table tr", has_text="built in: destructive tools")
    expect(destructive.locator("td")).to_have_text(["built in: destructive tools", "50.0", "5.0", "1.0", "98%", "20%"])
    expect(approver.locator("#calibration-bins tbody tr")).to_have_count(10)
    brier = float(approver.locator("#brier").text_content() or "nan")
    assert 0 <= brier <= 1, brier
    answered = sum(
        int(row.get_attribute("data-count") or 0) for row in approver.locator("#calibration-bins tbody tr").all()
    )
    assert answered >= 1, answered  # avery's answers (this test's, and those above), each after its suggestion
