"""Take the README's screenshots: the Catalog with the bundled servers' tools, logged in,
on a desktop and on a phone.

    .venv/bin/python -m tests.browser.screenshot [OUTPUT]     # default docs/screenshot.png

Starts a fresh host (`manage.py run`, temporary data dir), lets its worker list the bundled
servers, logs in as the first admin and captures the Catalog page at 1280x760 (OUTPUT) and
at 390x844 (OUTPUT with `-phone` before its suffix).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tests.helpers import REPO

from .host import BUNDLED_TOOLS, CHROMIUM_ARGS, RunningHost, chromium_path

VIEWPORT = {"width": 1280, "height": 760}
PHONE = {"width": 390, "height": 844}


def take(output: Path) -> None:
    path = chromium_path()
    if path is None:
        raise SystemExit("chromium is not installed")
    data_dir = Path(tempfile.mkdtemp(prefix="patchbay-screenshot-"))
    host = RunningHost(data_dir)
    try:
        host.wait_ready()
        host.wait_for_tools(*BUNDLED_TOOLS, "tasks__delete", "calendar__cancel", "mailbox__send")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
            try:
                output.parent.mkdir(parents=True, exist_ok=True)
                phone = output.with_name(f"{output.stem}-phone{output.suffix}")
                for viewport, path_out in ((VIEWPORT, output), (PHONE, phone)):
                    page = browser.new_context(base_url=host.url, viewport=viewport).new_page()
                    page.goto("/login/")
                    page.get_by_label("Username").fill("admin")
                    page.get_by_label("Password").fill(host.admin_password)
                    page.get_by_role("button", name="Log in").click()
                    expect(page.get_by_role("button", name="Log out")).to_be_visible()
                    page.goto("/catalog/", wait_until="networkidle")
                    expect(page.locator("tr.tool-row")).to_have_count(12)
                    expect(page.locator("html")).to_have_attribute("data-live", "connected")
                    page.evaluate("document.fonts.ready")
                    page.screenshot(path=str(path_out))
                    page.context.close()
            finally:
                browser.close()
    finally:
        host.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    take(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "screenshot.png")
