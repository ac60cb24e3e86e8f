"""Calls in a real browser (issue "calls"): the generated form, the confirmation dialog,
approval and denial from a second person's browser, and the caller's page updating live."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

APPROVER = ("avery", "avery-approves-9")
REQUESTER = ("riley", "riley-asks-3")
# Two plain users (see conftest.host): one who may approve calls, one who may only make them.
USERS = [(*APPROVER, ["calls.approve_call"]), (*REQUESTER, [])]
CALL_URL = re.compile(r"/calls/(\d+)/$")


def call_id(page: Page) -> int:
    expect(page).to_have_url(CALL_URL)
    found = CALL_URL.search(page.url)
    assert found
    return int(found.group(1))


def live(page: Page) -> None:
    """The page's websocket is up, and we can tell later that the page was never reloaded."""
    expect(page.locator("html")).to_have_attribute("data-live", "connected")
    page.evaluate("window.__same_page = true")


def not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__same_page") is True, "the page was reloaded"


def ask_to_delete(page: Page, message_id: str) -> int:
    """Fill mailbox__delete's form, check the confirmation dialog, confirm; the call's id."""
    page.goto("/catalog/mailbox__delete/")
    expect(page.locator("#call-form")).to_have_attribute("data-confirm", "1")
    field = page.locator('#form-editor [name="root[message_id]"]')
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
    # The caller cannot decide their own call.
    expect(page.locator(".decide")).to_have_count(0)
    return pk


def test_a_read_only_tool_is_called_through_the_generated_form(login: Callable[..., Page]) -> None:
    page = login(*REQUESTER)
    page.goto("/catalog/mailbox__search/")
    expect(page.get_by_text("Read-only: it runs at once.")).to_be_visible()
    form = page.locator("#call-form")
    expect(form).to_have_attribute("data-confirm", "0")
    query = form.locator('[name="root[query]"]')
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
    field = page.locator('#form-editor [name="root[message_id]"]')
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
