"""Requests for input in a real browser: the Input queue follows live when a server asks; the
form made from server-everything's whole schema is filled in, checked and sent; a URL a
server asks a person to open is opened only when they click it.

The requests are made as a running call's server makes them (`inputs.open_request`), by a
`manage.py shell` against the host's database: its live event reaches the open pages
through the host's Redis.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.calls.test_input_views import EVERYTHING_SCHEMA, MESSAGE, WHEN
from tests.host import RunningHost

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REQUESTER = ("riley", "riley-asks-3")
APPROVER = ("avery", "avery-approves-9")
OUTSIDER = ("nadia", "nadia-looks-only-7")
USERS = [(*REQUESTER, []), (*APPROVER, ["calls.approve_call"]), (*OUTSIDER, [])]

OPEN_REQUEST = """
import json
from django.contrib.auth.models import User
from django.utils import timezone
from hostapp.calls import inputs, life
from hostapp.calls.actions import Requester
from hostapp.calls.models import Call
from hostapp.calls.policy import Decision
from hostapp.catalog.models import Tool
from hostapp.mcp import InputAsk

tool = Tool.objects.select_related("server").get(exposed_name="tasks__list")
who = Requester.for_user(User.objects.get(username={username!r}))
call = life.open_call(life.new_fields(tool, Decision(Call.RUN, ""), who, {{}}, "d", timezone.now()))
row = inputs.open_request(call.pk, InputAsk(server="tasks", params=json.loads({params!r}), era="legacy"))
print(call.pk, row.pk)
"""


def open_request(host: RunningHost, username: str, params: dict[str, object]) -> tuple[int, int]:
    """A running call of `username`'s whose server asks for input: (call id, request id)."""
    code = OPEN_REQUEST.format(username=username, params=json.dumps(params))
    call, row = host.manage("shell", "-v", "0", "-c", code).split()
    return int(call), int(row)


def live(page: Page) -> None:
    """The page's websocket is up, and we can tell later that the page was never reloaded."""
    expect(page.locator("html")).to_have_attribute("data-live", "connected")
    page.evaluate("window.__same_page = true")


def not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__same_page") is True, "the page was reloaded"


def test_the_input_queue_lists_a_new_request_live(login: Callable[..., Page], host: RunningHost) -> None:
    requester = login(*REQUESTER)
    requester.goto("/calls/inputs/")
    expect(requester.get_by_text("No server is waiting for your input.")).to_be_visible()
    live(requester)
    approver = login(*APPROVER)
    approver.goto("/calls/inputs/")
    live(approver)
    outsider = login(*OUTSIDER)
    outsider.goto("/calls/inputs/")
    live(outsider)

    call, row = open_request(host, REQUESTER[0], {"message": "Which list?", "requestedSchema": {"type": "object"}})

    for page in (requester, approver):
        card = page.locator(f'article.input-request[data-input="{row}"]')
        expect(card).to_be_visible()
        expect(card.locator(".input-line")).to_have_text("tasks: Which list?")
        expect(card).to_contain_text(f"for call #{call} tasks__list")
        expect(card).to_contain_text("Call asked by riley (user)")
        not_reloaded(page)
    # Not hers to answer: her queue stays empty (it heard the same event).
    expect(outsider.get_by_text("No server is waiting for your input.")).to_be_visible()
    expect(outsider.locator("article.input-request")).to_have_count(0)

    # The requester opens it; the approver answers it from the queue. Both follow live: it
    # leaves the approver's queue, and the requester's page says how it ended, without its form.
    requester.locator(f'article.input-request[data-input="{row}"]').get_by_role("link", name="Answer").click()
    expect(requester.locator("#input-status")).to_have_text("waiting for an answer")
    expect(requester.locator("#input-answer")).to_be_visible()
    live(requester)
    approver.locator(f'article.input-request[data-input="{row}"]').get_by_role("link", name="Answer").click()
    expect(approver.locator("#input-message")).to_have_text("Which list?")
    expect(approver.locator("#input-form")).to_contain_text("The server asks for no fields")
    approver.get_by_role("button", name="Submit").click()
    expect(approver.get_by_text(f"Answered tasks's request for input of call #{call}.")).to_be_visible()
    expect(approver).to_have_url(re.compile(r"/calls/inputs/$"))
    expect(approver.get_by_text("No server is waiting for your input.")).to_be_visible()

    expect(requester.locator("#input-status")).to_have_text("answered")
    expect(requester.locator("#input-ended")).to_contain_text("Answered by avery at")
    expect(requester.locator("#input-answer")).to_be_hidden()
    not_reloaded(requester)


def test_server_everythings_whole_form_is_filled_in_checked_and_sent(
    login: Callable[..., Page], host: RunningHost
) -> None:
    schema = json.loads(json.dumps(EVERYTHING_SCHEMA))
    schema["properties"]["when"] = WHEN
    call, row = open_request(host, REQUESTER[0], {"message": MESSAGE, "requestedSchema": schema})

    page = login(*REQUESTER)
    page.goto(f"/calls/{call}/")
    expect(page.locator("#call-status")).to_have_text("waiting for input")
    page.locator("#call-inputs").get_by_role("link", name="Answer").click()
    expect(page).to_have_url(re.compile(rf"/calls/inputs/{row}/$"))
    expect(page.locator("#input-message")).to_have_text(MESSAGE)
    expect(page.locator(".input-ask .input-server")).to_have_text("tasks")

    form = page.locator("#input-form")
    for name in schema["properties"]:
        expect(form.locator(f'.input-field[data-property="{name}"]')).to_have_count(1)
    # The schema's defaults are filled in.
    expect(form.get_by_label("String with default", exact=True)).to_have_value("It was a dark and stormy night.")
    expect(form.get_by_label("Integer", exact=True)).to_have_value("42")
    expect(form.get_by_label("Legacy Titled Single Select Enum", exact=True)).to_have_value("pet-1")
    expect(
        form.get_by_role("group", name="Untitled Multiple Select Enum", exact=True).get_by_label("Guitar")
    ).to_be_checked()
    expect(
        form.get_by_role("group", name="Titled Multiple Select Enum", exact=True).get_by_label("Tuna")
    ).to_be_checked()

    # The browser checks first: the required name is missing.
    page.get_by_role("button", name="Submit").click()
    assert page.evaluate("document.querySelector('[data-property=\"name\"] input').validity.valueMissing")
    expect(page).to_have_url(re.compile(rf"/calls/inputs/{row}/$"))

    form.get_by_label("String", exact=True).fill("Ada Lovelace")
    form.get_by_label("Boolean", exact=True).check()
    form.get_by_label("String with email format").fill("ada@localhost")  # the browser takes it; the host does not
    form.get_by_label("String with uri format").fill("https://ada.example.com/")
    form.get_by_label("String with date format").fill("1815-12-10")
    form.get_by_label("Integer", exact=True).fill("7")
    form.get_by_label("Number in range 1-1000").fill("2.5")
    form.get_by_label("Untitled Single Select Enum", exact=True).select_option("Joey")
    form.get_by_label("Titled Single Select Enum", exact=True).select_option(label="Wonder Woman")
    form.get_by_label("Legacy Titled Single Select Enum", exact=True).select_option(label="Dogs")
    instruments = form.get_by_role("group", name="Untitled Multiple Select Enum", exact=True)
    instruments.get_by_label("Piano").check()
    fish = form.get_by_role("group", name="Titled Multiple Select Enum", exact=True)
    fish.get_by_label("Tuna").uncheck()
    fish.get_by_label("Salmon").check()
    form.get_by_label("Meeting time").fill("2026-12-03T10:30")
    page.get_by_role("button", name="Submit").click()

    # The host's own check: the error is next to its field, and what was typed is kept.
    email = page.locator('.input-field[data-property="email"]')
    expect(email.locator(".sf-error")).to_have_text("must be an email address")
    expect(email.locator("input")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#input-form").get_by_label("String", exact=True)).to_have_value("Ada Lovelace")
    page.locator("#input-form").get_by_label("String with email format").fill("ada@example.com")
    page.get_by_role("button", name="Submit").click()

    expect(page).to_have_url(re.compile(rf"/calls/{call}/$"))
    expect(page.get_by_text(f"Answered tasks's request for input of call #{call}.")).to_be_visible()
    expect(page.locator("#call-status")).to_have_text("running")
    answered = page.locator(f'#call-inputs li[data-input="{row}"]')
    expect(answered.locator(".badge").first).to_have_text("answered")
    expect(answered).to_contain_text("Answered by riley at")
    content = answered.locator("dl.input-content")
    expect(content.locator("dt")).to_have_count(14)
    for label, value in [
        ("String", "Ada Lovelace"),
        ("Boolean", "yes"),
        ("String with email format", "ada@example.com"),
        ("Integer", "7"),
        ("Untitled Multiple Select Enum", "Guitar, Piano"),
        ("Titled Single Select Enum", "Wonder Woman"),
        ("Titled Multiple Select Enum", "Salmon"),
        ("Legacy Titled Single Select Enum", "Dogs"),
        ("Meeting time", "2026-12-03T10:30:00+00:00"),
    ]:
        expect(content.locator(f"xpath=dt[normalize-space()='{label}']/following-sibling::dd[1]")).to_have_text(value)


def test_a_url_is_opened_only_when_the_person_clicks_it(login: Callable[..., Page], host: RunningHost) -> None:
    url = f"{host.url}/healthz?connect=account&state=s-123"
    call, row = open_request(
        host, REQUESTER[0], {"mode": "url", "message": "Connect your account.", "url": url, "elicitationId": "e-1"}
    )
    page = login(*REQUESTER)
    opened: list[str] = []
    page.context.on("page", lambda p: opened.append(p.url))

    page.goto(f"/calls/inputs/{row}/")
    live(page)
    expect(page.locator("#input-host")).to_have_text("127.0.0.1")
    expect(page.locator("#input-url")).to_have_text(url)
    link = page.get_by_role("link", name="Open 127.0.0.1 in a new tab")
    expect(link).to_have_attribute("href", url)
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(page.locator("iframe")).to_have_count(0)
    assert opened == [] and len(page.context.pages) == 1, "the page opened the server's URL by itself"

    with page.context.expect_page() as opening:
        link.click()
    tab = opening.value
    tab.wait_for_load_state()
    assert tab.url == url
    assert tab.evaluate("window.opener") is None
    tab.close()

    page.get_by_role("button", name="I have done it").click()
    expect(page).to_have_url(re.compile(rf"/calls/{call}/$"))
    expect(page.get_by_text(f"Answered tasks's request for input of call #{call}.")).to_be_visible()
    expect(page.locator(f'#call-inputs li[data-input="{row}"] .badge').first).to_have_text("answered")
