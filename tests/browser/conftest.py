"""Browser tests: Debian's chromium driven by Playwright against a real `manage.py run`.

One host per test module (web + worker + beat, SQLite and an embedded Redis in a fresh
data dir). Without chromium the tests skip, unless CI is set: then they fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from .host import BUNDLED_TOOLS, CHROMIUM_ARGS, RunningHost, chromium_path

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

# Long enough for a worker round trip on a slow, busy CI machine; expect() polls, it does not sleep.
EXPECT_TIMEOUT_MS = 20_000
VIEWPORT = {"width": 1280, "height": 760}
PHONE = {"width": 390, "height": 844}


def _require_chromium() -> str:
    path = chromium_path()
    if path is None:
        reason = "chromium is not installed (apt-get install chromium): the browser tests need it"
        if IN_CI:
            pytest.fail(f"{reason}; CI is set, so this fails instead of skipping")
        pytest.skip(reason)
    return path


# Module scope, not session: while Playwright's sync API is alive it keeps an event loop
# marked running in this thread, and every later test that starts one would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = _require_chromium()
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


class Hosts:
    """One host per test module. The next module's host starts while this module runs, and a
    finished host stops in the background: `manage.py run` takes seconds to start and to stop."""

    def __init__(self, modules: list[str], tmp: pytest.TempPathFactory) -> None:
        self.modules = modules
        self.tmp = tmp
        self.waiting: dict[str, RunningHost] = {}
        self.done: list[RunningHost] = []

    def _start(self) -> RunningHost:
        return RunningHost(self.tmp.mktemp("host"))

    def take(self, module: str) -> RunningHost:
        host = self.waiting.pop(module, None) or self._start()
        later = self.modules[self.modules.index(module) + 1 :] if module in self.modules else []
        if later and later[0] not in self.waiting:
            self.waiting[later[0]] = self._start()
        return host

    def release(self, host: RunningHost) -> None:
        host.terminate()
        self.done.append(host)

    def close(self) -> None:
        for host in [*self.waiting.values(), *self.done]:
            host.stop()


@pytest.fixture(scope="session")
def hosts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    _require_chromium()
    modules = list(dict.fromkeys(i.module.__name__ for i in request.session.items if "host" in i.fixturenames))
    pool = Hosts(modules, tmp_path_factory)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def host(hosts: Hosts, request: pytest.FixtureRequest) -> Iterator[RunningHost]:
    """A fresh Patchbay for this module; its first run imports and lists the bundled servers.

    A module may set `USERS = [(username, password, ["app_label.codename", ...]), ...]`:
    plain (non-staff) users to create with those permissions.
    """
    running = hosts.take(request.module.__name__)
    try:
        running.wait_ready()
        assert "Imported the bundled servers from servers/mcp.json" in running.output
        # The module's USERS, created while the worker lists the bundled servers.
        users = getattr(request.module, "USERS", ())
        creating = running.start_manage(*running.create_users_command(*users)) if users else None
        running.wait_for_tools(*BUNDLED_TOOLS)
        if creating is not None:
            running.finish(creating)
        yield running
    finally:
        hosts.release(running)


class Sessions:
    """Logged-in browser contexts of one module, and the script errors their pages raised."""

    def __init__(self, browser: Browser, host: RunningHost) -> None:
        self.browser = browser
        self.host = host
        self.contexts: list[BrowserContext] = []
        self.page_errors: list[str] = []

    def login(
        self, username: str = "admin", password: str | None = None, viewport: dict[str, int] | None = None
    ) -> Page:
        context = self.browser.new_context(base_url=self.host.url, viewport=viewport or VIEWPORT)
        context.set_default_timeout(EXPECT_TIMEOUT_MS)
        self.contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: self.page_errors.append(f"{username}: {page.url}: {error}"))
        page.goto("/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(self.host.admin_password if password is None else password)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture(scope="module")
def sessions(browser: Browser, host: RunningHost) -> Iterator[Sessions]:
    s = Sessions(browser, host)
    yield s
    s.close()


@pytest.fixture
def login(sessions: Sessions) -> Iterator[Callable[..., Page]]:
    """`login(username="admin", password=None, viewport=None)`: a new page, logged in, in its own browser context.

    After the test, no page may have raised an uncaught script error.
    """
    sessions.page_errors.clear()
    yield sessions.login
    assert not sessions.page_errors, f"script errors on the pages: {sessions.page_errors}"
