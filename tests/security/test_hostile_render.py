"""Hostile tool texts and results stay text in a real browser (Debian's chromium, Playwright).

The `hostile` server (tests/security/hostile_server.py, imported as trusted with
`manage.py mcp import`) lists a read-only tool whose title, description, argument texts
and icons carry script, and whose result carries it too (text, a `javascript:` resource
link, an embedded HTML resource, an SVG image, structured content). A person browses the
catalog, opens the tool, calls it and reads the call: the markup must be visible as text,
and nothing of it may run (`window.__pwned` stays undefined, no element carries a handler,
no link or image points at `javascript:`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from .host import SecureHost
from .hostile_server import IMG, SCRIPT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
# Long enough for a call's round trip on a busy CI machine; expect() polls, it does not sleep.
EXPECT_TIMEOUT_MS = 20_000

# What ran, if anything did: the flag the payloads set, elements with inline handlers, links
# and sources with the javascript: scheme, and scripts that are not inert JSON data.
EVIDENCE_JS = """() => ({
  pwned: typeof window.__pwned !== "undefined",
  handlers: document.querySelectorAll("[onerror],[onload],[onclick],[onmouseover]").length,
  jsLinks: Array.from(document.querySelectorAll("a[href],area[href]")).filter(
    a => a.getAttribute("href").trim().toLowerCase().startsWith("javascript:")).length,
  jsSources: Array.from(document.querySelectorAll("[src]")).filter(
    e => /^\\s*(javascript:|data:image\\/svg)/i.test(e.getAttribute("src"))).length,
  liveScripts: Array.from(document.scripts).filter(
    s => s.type !== "application/json" && s.textContent.includes("__pwned")).length,
})"""
CLEAN = {"pwned": False, "handlers": 0, "jsLinks": 0, "jsSources": 0, "liveScripts": 0}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = shutil.which("chromium")
    if path is None:
        reason = "chromium is not installed (apt-get install chromium); the browser tests need it"
        if IN_CI:
            pytest.fail(reason + " (CI is set, so this fails instead of skipping)")
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, host: SecureHost) -> Iterator[Any]:
    """A logged-in page of the administrator, that records any dialog a script would open."""
    from playwright.sync_api import expect

    context = browser.new_context(base_url=host.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(host.password("admin"))
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    try:
        yield page
    finally:
        context.close()


def assert_nothing_ran(page: Any, where: str) -> None:
    page.wait_for_load_state("networkidle")
    evidence = page.evaluate(EVIDENCE_JS)
    assert evidence == CLEAN, f"{where}: {evidence}"
    assert page.dialogs == [], f"{where}: {page.dialogs}"


def test_hostile_tool_texts_and_results_are_shown_as_text_and_never_run(page: Any, host: SecureHost) -> None:
    from playwright.sync_api import expect

    # The catalog: the description is shown, markup and all, as text.
    page.goto("/catalog/")
    row = page.locator('tr[data-tool="hostile__render"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text(SCRIPT)
    expect(row).to_contain_text(IMG)
    assert_nothing_ran(page, "the catalog")

    # The tool page: title, description, argument texts, the generated form, the icons.
    page.goto("/catalog/hostile__render/")
    expect(page.locator("h1")).to_contain_text(f"Render {SCRIPT}")
    expect(page.locator("p.prewrap").first).to_contain_text(SCRIPT)
    expect(page.locator("ul.tree").first).to_contain_text(f"Argument {IMG}")
    expect(page.locator("#call-fields")).to_contain_text(f"Text {SCRIPT}")
    icons = page.locator("img.tool-icon")
    expect(icons).to_have_count(1)
    assert icons.get_attribute("src").startswith("data:image/png;base64,")
    assert_nothing_ran(page, "the tool page")

    # Call it from the form (read-only and trusted: it runs at once) and read the call: under
    # the form first (its fragment, fetched by the page's script), then on its own page.
    page.locator("#call-submit").click()
    for where in ("the call under the form", "the call page"):
        if where == "the call page":
            page.locator("#call-outcome-link").click()
            page.wait_for_url("**/calls/*/")
        expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded")
        result = page.locator("#call-result")
        expect(result.locator("pre.result-text")).to_contain_text(f"{SCRIPT} {IMG} Renders markup as text.")
        expect(page.locator("#call-arguments")).to_contain_text("window.__pwned=1")
        links = result.locator("p.resource-link")
        expect(links).to_have_count(2)
        expect(links.nth(0)).to_contain_text(f"link {SCRIPT}")
        expect(links.nth(0).locator("a")).to_have_count(0)  # javascript: is shown, never linked
        expect(links.nth(0)).to_contain_text("javascript:window.__pwned=1")
        expect(links.nth(1).locator("a")).to_contain_text(f"https link {IMG}")
        expect(result.locator("div.resource pre")).to_contain_text(SCRIPT)
        expect(result).to_contain_text("of a type that is not shown")  # the SVG "image"
        expect(result.locator("img")).to_have_count(0)
        assert_nothing_ran(page, where)

    # The list pages that show the call, fetched again by the live script as fragments.
    for path in ("/calls/", "/servers/hostile/", "/"):
        page.goto(path)
        assert_nothing_ran(page, path)


def test_the_evidence_check_sees_markup_that_runs(browser: Any) -> None:
    """The control: the same check, on a page where the payloads are markup, finds them."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.dialogs = []
        page.set_content(f"<p>{SCRIPT} {IMG}</p><a href='javascript:void(0)'>x</a>")
        page.wait_for_function("typeof window.__pwned !== 'undefined'")
        evidence = page.evaluate(EVIDENCE_JS)
        assert evidence["pwned"] and evidence["handlers"] == 1 and evidence["jsLinks"] == 1
        assert evidence["liveScripts"] == 1
    finally:
        context.close()
