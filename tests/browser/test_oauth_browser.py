"""A remote server behind OAuth, as a person meets it: added, "needs authorization",
Connect, the authorization server's consent page, back to the host, tools listed and
called, the token refreshed, the grant revoked, "needs authorization" again.

The server is `tests.oauthserver`: the SDK's server-side auth with a local authorization
server (dynamic registration, PKCE, consent page, refresh, revocation) on 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.host import RunningHost
from tests.helpers import wait_until
from tests.oauthserver.test_oauthserver import RunningServer, launch, stop, wait_ready

TOKEN_LIFETIME = 6


@pytest.fixture(scope="module")
def oauth_server() -> Iterator[RunningServer]:
    proc = launch("--token-lifetime", str(TOKEN_LIFETIME))
    try:
        yield wait_ready(proc)
    finally:
        stop(proc)


def import_server(host: RunningHost, server: RunningServer, tmp_path: Path) -> None:
    config = tmp_path / "notes.json"
    config.write_text(json.dumps({"mcpServers": {"notes": {"url": server.url, "trusted": True}}}))
    host.manage("mcp", "import", str(config))


def call_whoami(page: Page) -> None:
    page.goto("/catalog/notes__whoami/")
    page.locator("#call-form").get_by_role("button", name="Call", exact=True).click()


def test_a_server_behind_oauth_is_connected_in_the_browser_and_stays_connected(
    host: RunningHost,
    oauth_server: RunningServer,
    login: Callable[..., Page],
    tmp_path: Path,
) -> None:
    import_server(host, oauth_server, tmp_path)
    page = login()

    # The first listing meets a 401: the server needs authorization and offers Connect.
    page.goto("/servers/")
    page.locator("#server-notes").get_by_role("button", name="Refresh").click()

    def needs_authorization() -> bool:
        page.goto("/servers/")
        return page.locator("#server-notes .state-needs-authorization").count() > 0

    wait_until(needs_authorization, timeout=90, interval=1, what="the server to need authorization")
    page.locator("#server-notes").get_by_role("button", name="Connect").click()

    # The authorization server's own consent page, then back to the host.
    expect(page.get_by_role("heading", name="Authorize Patchbay")).to_be_visible(timeout=30_000)
    assert page.url.startswith(oauth_server.base)
    expect(page.locator("#scopes")).to_contain_text("mcp:read")
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_text("notes is connected.")).to_be_visible(timeout=30_000)
    assert page.url.startswith(host.url) and page.url.endswith("/servers/notes/")
    card = page.locator("#authorization")
    expect(card.locator(".state-ready")).to_have_text("connected")
    expect(card).to_contain_text("mcp:read")
    expect(card).to_contain_text(oauth_server.base)
    authorize = oauth_server.state()["last_authorize"]
    assert authorize["redirect_uri"] == f"{host.url}/oauth/callback/"
    assert authorize["code_challenge_method"] == "S256" and authorize["resource"] == oauth_server.url

    # The worker lists the tools with the new token; a call goes through.
    host.wait_for_tools("notes__whoami", "notes__echo", "notes__write_note")
    call_whoami(page)
    expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded", timeout=30_000)
    expect(page.locator("#call-result")).to_contain_text("mcp:read")

    # Past the token's lifetime the host refreshes it and the next call still works.
    time.sleep(TOKEN_LIFETIME + 1)
    call_whoami(page)
    expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded", timeout=30_000)
    assert oauth_server.state()["refreshes"] >= 1

    # The authorization server revokes the grant: the next call fails, and the server shows
    # "needs authorization" again with Connect.
    httpx.post(f"{oauth_server.base}/admin/revoke-all").raise_for_status()
    call_whoami(page)
    expect(page.locator("#call-status")).to_have_attribute("data-status", "failed", timeout=30_000)
    expect(page.locator("body")).to_contain_text("connect it again")

    wait_until(needs_authorization, timeout=90, interval=1, what="the server to need authorization again")
    expect(page.locator("#server-notes").get_by_role("button", name="Connect")).to_be_visible()

    # No token ever reaches a page.
    client = host.http_client()
    try:
        pages = [client.get(p).text for p in ("/servers/", "/servers/notes/", "/catalog/", "/calls/")]
    finally:
        client.close()
    for text in pages:
        assert "access_token" not in text and "refresh_token" not in text
