"""Every page on a phone (issue "a newcomer's first hour", item 3): at 390x844 the navigation
keeps every section within reach, tables scroll inside their boxes and the page itself never
scrolls sideways, buttons stay inside their cards."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import PHONE
from .host import RunningHost

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _call(host: RunningHost, tool: str, arguments: dict[str, object], status: int) -> int:
    proc = host.start_manage("mcp", "call", tool, "--args", json.dumps(arguments), "--json")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == status, (out, err)
    return int(json.loads(out)["call_id"])


@pytest.fixture(scope="module")
def calls(host: RunningHost) -> dict[str, int]:
    """A call that ran, one that waits for approval and one in the outbox."""
    return {
        "ran": _call(host, "mailbox__search", {"query": "invoice"}, 0),
        "waiting": _call(host, "mailbox__delete", {"message_id": "msg-0001"}, 3),
        "delivered": _call(host, "tasks__add", {"title": "phone layout"}, 4),  # queued: exit 4
    }


def _box(locator: Locator) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None, f"{locator} is not shown"
    return box


def _inside(inner: Locator, outer: Locator) -> None:
    a, b = _box(inner), _box(outer)
    assert a["x"] >= b["x"] - 0.5 and a["x"] + a["width"] <= b["x"] + b["width"] + 0.5, (a, b)


def _no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"], f"{page.url}: the page is {width}px wide on a {PHONE['width']}px screen"


def test_every_page_fits_a_phone(login: Callable[..., Page], calls: dict[str, int]) -> None:
    page = login(viewport=PHONE)
    action = page.request.get("/api/v1/calls", params={"tool": "tasks__add", "limit": 1}).json()[0]
    pages = [
        "/",
        "/servers/",
        "/servers/mailbox/",
        "/servers/add/",
        "/catalog/",
        "/catalog/mailbox__search/",
        "/catalog/tasks__add/",
        "/calls/",
        "/calls/pending/",
        "/calls/suggestions/",
        f"/calls/{calls['ran']}/",
        f"/calls/{calls['waiting']}/",
        f"/calls/{calls['delivered']}/",
        "/outbox/",
        "/outbox/dead/",
        "/agents/",
    ]
    if action.get("action_id"):
        pages.append(f"/outbox/{action['action_id']}/")
    for url in pages:
        page.goto(url)
        expect(page.locator("main")).to_be_visible()
        _no_sideways_scroll(page)
        # Every section of the navigation, and the way out, are on the screen.
        for name in ("Home", "Servers", "Catalog", "Calls", "Pending", "Outbox", "Agents"):
            link = page.locator("header.topbar").get_by_role("link", name=name, exact=False).first
            expect(link).to_be_in_viewport()
        expect(page.get_by_role("button", name="Log out")).to_be_in_viewport()


def test_tables_scroll_inside_their_box(login: Callable[..., Page], calls: dict[str, int]) -> None:
    page = login(viewport=PHONE)
    page.goto("/calls/")
    table = page.locator("table.calls")
    expect(table).to_be_visible()
    holder = page.locator(".table-scroll").filter(has=table)
    _inside(holder, page.locator("main"))
    wide = table.evaluate("el => el.scrollWidth")
    shown = holder.evaluate("el => el.clientWidth")
    if wide > shown:  # wider than the screen: it scrolls in its box, not the page
        holder.evaluate("el => { el.scrollLeft = el.scrollWidth; }")
        assert holder.evaluate("el => el.scrollLeft") > 0
    _no_sideways_scroll(page)


def test_the_decision_buttons_stay_in_their_card(login: Callable[..., Page], calls: dict[str, int]) -> None:
    page = login(viewport=PHONE)
    page.goto("/calls/pending/")
    card = page.locator(f'article.pending-call[data-call="{calls["waiting"]}"]')
    expect(card).to_be_visible()
    for button in ("Approve", "Approve and always allow", "Deny"):
        _inside(card.get_by_role("button", name=button, exact=True), card)
    _inside(card.get_by_label("Reason for denying"), card)
    page.goto(f"/calls/{calls['waiting']}/")
    decide = page.locator(".decide")
    holder = page.locator(".card").filter(has=decide).last
    for button in ("Approve", "Deny"):
        _inside(decide.get_by_role("button", name=button, exact=True), holder)
    _no_sideways_scroll(page)
