"""The browser tests' host (`tests.host.RunningHost`) and how they start chromium.

Shared by the browser tests' fixtures (conftest.py) and by `python -m tests.browser.screenshot`.
"""

from __future__ import annotations

import shutil

from tests.host import RunningHost

__all__ = ["BUNDLED_TOOLS", "CHROMIUM_ARGS", "RunningHost", "chromium_path"]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
BUNDLED_TOOLS = ("mailbox__search", "mailbox__delete", "tasks__list", "calendar__list")


def chromium_path() -> str | None:
    return shutil.which("chromium")
