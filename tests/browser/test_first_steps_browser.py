"""A newcomer's guided start (issue 25, item 6): Home lists three first steps (call a
read-only tool, approve a call, create an agent token), each ticked off as it is done; the
Agents page creates a token with Post/Redirect/Get and shows it once, with a Copy button and
ready configuration for the clients people use; and it fits a phone."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from tests.host import RunningHost

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE: ViewportSize = {"width": 390, "height": 844}
STEPS = ("read-only-call", "approval", "token")
TOKEN = re.compile(r"^pb_[A-Za-z0-9_-]{20,}$")


def ticked(page: Page) -> dict[str, bool]:
    """Each first step on the Home page, and whether it is ticked."""
    steps = page.locator("#first-steps li.step")
    expect(steps).to_have_count(len(STEPS))
    return {
        step.get_attribute("data-step") or "": "done" in (step.get_attribute("class") or "").split()
        for step in steps.all()
    }


def ask_to_delete(host: RunningHost, message_id: str) -> int:
    """A call of the destructive mailbox__delete from the command line: it waits for approval
    (exit status 3); its id."""
    proc = host.start_manage(
        "mcp", "call", "mailbox__delete", "--args", json.dumps({"message_id": message_id}), "--json"
    )
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 3, (out, err)
    return int(json.loads(out)["call_id"])


def create_token(page: Page, name: str) -> str:
    """Create a token on the Agents page; the secret the page it is redirected to shows."""
    page.goto("/agents/")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_be_visible()
    secret = page.locator("#new-token-secret").text_content() or ""
    assert TOKEN.match(secret), secret
    return secret


def test_a_newcomer_follows_the_first_steps_from_home(login: Callable[..., Page], host: RunningHost) -> None:
    page = login()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=host.url)

    page.goto("/")
    expect(page.get_by_role("heading", name="First steps")).to_be_visible()
    assert ticked(page) == dict.fromkeys(STEPS, False)
    expect(page.locator("#first-steps-done")).to_have_count(0)

    # 1. A read-only tool, found through the step's link to the catalog's read-only tools.
    page.locator('[data-step="read-only-call"]').get_by_role("link").click()
    expect(page).to_have_url(re.compile(r"/catalog/\?class=read_only$"))
    expect(page.locator('tr.tool-row[data-tool="mailbox__delete"]')).to_have_count(0)
    page.locator('tr.tool-row[data-tool="tasks__list"]').get_by_role("link").click()
    expect(page).to_have_url(re.compile(r"/catalog/tasks__list/$"))
    page.locator("#call-submit").click()
    outcome = page.locator("#call-outcome")
    expect(outcome).to_be_visible()
    expect(page.locator("#call-outcome-title")).to_contain_text("succeeded")

    # 2. A token: the form posts, the answer is a redirect to the Agents page, which shows it once.
    secret = create_token(page, "claude-code")
    expect(page).to_have_url(re.compile(r"/agents/$"))
    expect(page.get_by_text("Created a token for claude-code.")).to_be_visible()
    command = page.locator("#snippet-claude-code-text")
    expect(command).to_have_text(
        f'claude mcp add --transport http patchbay {host.url}/mcp --header "Authorization: Bearer {secret}"'
    )
    for key in ("cursor", "vscode", "claude-desktop"):
        config = json.loads(page.locator(f"#snippet-{key}-text").text_content() or "")
        assert secret in json.dumps(config) and f"{host.url}/mcp" in json.dumps(config), key

    copy = page.get_by_role("button", name="Copy the Claude Code configuration")
    copy.click()
    expect(page.locator("#snippet-claude-code .snippet-head button")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == command.text_content()
    page.get_by_role("button", name="Copy the token").click()
    expect(page.locator("#new-token .copyable button")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == secret

    # A reload asks for the page again, not for another token: the secret is gone, one token stays.
    page.reload()
    expect(page).to_have_url(re.compile(r"/agents/$"))
    expect(page.get_by_role("heading", name="Agents")).to_be_visible()
    expect(page.locator("#new-token")).to_have_count(0)
    assert secret not in page.content()
    expect(page.get_by_text("exists already")).to_have_count(0)
    expect(page.get_by_role("cell", name="claude-code", exact=True)).to_have_count(1)

    # Home: two steps done; the approval is left.
    page.goto("/")
    assert ticked(page) == {"read-only-call": True, "approval": False, "token": True}
    expect(page.locator("html")).to_have_attribute("data-live", "connected")

    # 3. An approval, from another browser; the open Home page folds its steps without a reload.
    pk = ask_to_delete(host, "msg-0001")
    approver = login()
    approver.goto("/")
    approver.locator('[data-step="approval"]').get_by_role("link", name="the Pending page").click()
    expect(approver).to_have_url(re.compile(r"/calls/pending/$"))
    card = approver.locator(f'article.pending-call[data-call="{pk}"]')
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(approver.get_by_text(f"Approved call #{pk}.")).to_be_visible()

    expect(page.locator("#first-steps-done")).to_be_visible()
    expect(page.locator("#first-steps-done")).to_contain_text("First steps done")
    expect(page.locator("#first-steps")).to_have_count(0)


def test_the_agents_page_with_a_new_token_fits_a_phone(login: Callable[..., Page]) -> None:
    page = login()
    page.set_viewport_size(PHONE)
    create_token(page, "phone-agent")

    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"], f"the Agents page is {width}px wide on a {PHONE['width']}px screen"
    # The long lines scroll inside their boxes; every Copy button is on the screen.
    desktop = page.locator("#snippet-claude-desktop-text")
    assert desktop.evaluate("el => el.scrollWidth > el.clientWidth && getComputedStyle(el).overflowX === 'auto'")
    for button in page.locator("#new-token [data-copy-target]").all():
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box


def test_without_the_clipboard_api_copy_selects_the_text_and_copies_it_the_old_way(login: Callable[..., Page]) -> None:
    page = login()
    # As on plain http from another host (no secure context): no navigator.clipboard.
    page.add_init_script("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    create_token(page, "no-clipboard")
    command = page.locator("#snippet-claude-code-text")

    page.get_by_role("button", name="Copy the Claude Code configuration").click()

    button = page.locator("#snippet-claude-code .snippet-head button")
    expect(button).to_have_text(re.compile(r"^(Copied|Selected: press Ctrl\+C)$"))
    assert page.evaluate("window.getSelection().toString()") == command.text_content()


def test_a_view_is_edited_on_the_agents_page_and_a_rename_reaches_it(login: Callable[..., Page]) -> None:
    page = login()
    create_token(page, "viewer")
    page.reload()
    costs = page.locator('details.view-cost[data-agent="viewer"]')
    expect(costs.locator("summary")).to_contain_text("12 tools")  # every bundled tool

    editing = page.locator('details.edit-view[data-agent="viewer"]')
    editing.locator("summary").click()
    editing.get_by_label("Servers it may reach").select_option(["tasks"])
    editing.get_by_label("Highest class it sees").select_option("write")
    editing.get_by_label("Without the prefix").check()
    editing.get_by_role("button", name="Save view").click()
    expect(page.get_by_text("viewer now sees servers tasks; up to write; its own names, no prefix.")).to_be_visible()
    costs.locator("summary").click()
    expect(costs.locator("summary")).to_contain_text("3 tools")
    expect(costs.locator("tbody code")).to_have_text(["add", "complete", "list"])
    # The form shows the view as it is now.
    editing.locator("summary").click()
    expect(editing.get_by_label("Without the prefix")).to_be_checked()
    expect(editing.get_by_label("Highest class it sees")).to_have_value("write")

    # An admin renames a tool on its page; the view lists the new name.
    page.goto("/catalog/tasks__list/")
    page.get_by_label("Name for agents").fill("list_tasks")
    page.get_by_label("Description for agents").fill("Lists the tasks, open ones first.")
    page.get_by_role("button", name="Save for agents").click()
    expect(page.get_by_text("Agents are now given list_tasks as an admin wrote it.")).to_be_visible()
    expect(page.locator("#for-agents .agent-description")).to_have_text("Lists the tasks, open ones first.")
    page.goto("/agents/")
    costs.locator("summary").click()
    expect(costs.locator("tbody code")).to_have_text(["add", "complete", "list_tasks"])
    # A clash is refused with the reason, and the page says so.
    page.goto("/catalog/tasks__add/")
    page.get_by_label("Name for agents").fill("list_tasks")
    page.get_by_role("button", name="Save for agents").click()
    expect(
        page.get_by_text("Not changed: 'list_tasks' is taken: agents already see tasks__list by that name")
    ).to_be_visible()
