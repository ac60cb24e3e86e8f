"""server-everything (npm, as users run it) asks a person in a real browser, end to end.

The host gets server-everything twice, trusted: `everything` over stdio and `web` over
Streamable HTTP; their `trigger-elicitation-request` and `trigger-url-elicitation` run at
once (an admin's read-only override). `mcp call` starts each
call from the CLI (the call lives in its process, which waits); the admin answers in the
browser from the Input queue; the call ends as the server makes of the answer (accepted,
declined, cancelled), on the call's page and in the CLI's output.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.gateway.conftest import everything_url  # noqa: F401  (server-everything over HTTP)
from tests.host import RunningHost
from tests.mcp.test_interop import EVERYTHING, NODE, _need_node

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FORM = "everything__trigger-elicitation-request"
URL = "everything__trigger-url-elicitation"
TOOLS = [f"{s}__{t}" for s in ("everything", "web") for t in ("trigger-elicitation-request", "trigger-url-elicitation")]
_ready: set[str] = set()


def _with_everything(host: RunningHost, url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    if host.url in _ready:
        return
    _need_node()
    config = tmp_path_factory.mktemp("everything") / "servers.json"
    servers = {
        "everything": {"command": str(NODE), "args": [str(EVERYTHING)], "trusted": True},
        "web": {"type": "http", "url": url, "trusted": True},
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    host.manage("mcp", "import", str(config), "--refresh")
    host.manage(
        "shell",
        "-c",
        "from hostapp.catalog import actions; from hostapp.catalog.models import Tool; "
        f"[actions.set_class_override(Tool.objects.get(exposed_name=n), 'read_only') for n in {TOOLS!r}]",
    )
    _ready.add(host.url)


def _call(host: RunningHost, tool: str, arguments: dict[str, object]) -> subprocess.Popen[str]:
    return host.start_manage("mcp", "call", tool, "--args", json.dumps(arguments), "--json")


def _answer_page(page: Page, tool: str) -> None:
    """From the Input queue, the newest request of a call of `tool`."""
    page.goto("/calls/inputs/")
    card = page.locator("article.input-request", has_text=tool).last
    expect(card).to_be_visible()
    card.get_by_role("link", name="Answer").click()
    expect(page.locator(".input-ask .input-server")).to_have_text(tool.split("__")[0])


def _ended(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"mcp call exited {proc.returncode}\n{out}\n{err}"
    summary: dict[str, object] = json.loads(out)
    return summary


def _text(summary: dict[str, object]) -> str:
    result = summary["result"]
    assert isinstance(result, dict)
    return "\n".join(c.get("text", "") for c in result["content"])


@pytest.fixture
def everything(host: RunningHost, everything_url: str, tmp_path_factory: pytest.TempPathFactory) -> RunningHost:  # noqa: F811
    _with_everything(host, everything_url, tmp_path_factory)
    return host


@pytest.mark.parametrize("server", ["everything", "web"])
def test_a_person_answers_server_everythings_form_and_the_call_ends_with_the_answer(
    login: Callable[..., Page], everything: RunningHost, server: str
) -> None:
    page = login()
    tool = f"{server}__trigger-elicitation-request"
    running = _call(everything, tool, {})
    _answer_page(page, tool)
    form = page.locator("#input-form")
    expect(form.get_by_label("String with default", exact=True)).to_have_value("It was a dark and stormy night.")
    form.get_by_label("String", exact=True).fill("Grace Hopper")
    form.get_by_label("Integer", exact=True).fill("9")
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/calls/inputs/$"))  # back to the queue it came from

    summary = _ended(running)
    assert summary["status"] == "succeeded"
    text = _text(summary)
    assert "- Name: Grace Hopper" in text and "- Favorite Integer: 9" in text
    page.goto(f"/calls/{summary['call_id']}/")
    expect(page.locator("#call-status")).to_have_text("succeeded")
    expect(page.locator("#call-inputs")).to_contain_text("answered")
    expect(page.get_by_text("User provided the requested information!")).to_be_visible()


@pytest.mark.parametrize(("button", "said"), [("Decline", "User declined"), ("Cancel", "User cancelled")])
def test_a_declined_or_cancelled_form_ends_the_call_as_the_server_says(
    login: Callable[..., Page], everything: RunningHost, button: str, said: str
) -> None:
    page = login()
    running = _call(everything, FORM, {})
    _answer_page(page, FORM)
    page.get_by_role("button", name=button).click()

    summary = _ended(running)
    assert summary["status"] == "succeeded"
    assert said in _text(summary)


def test_a_url_request_is_opened_by_the_person_and_then_accepted(
    login: Callable[..., Page], everything: RunningHost
) -> None:
    page = login()
    tool = "web__trigger-url-elicitation"  # over Streamable HTTP (the stdio one answers the same)
    running = _call(everything, tool, {"url": "https://example.com/connect?step=1"})
    _answer_page(page, tool)
    expect(page.get_by_text("https://example.com/connect?step=1")).to_be_visible()
    assert len(page.context.pages) == 1  # nothing opened by itself
    page.get_by_role("button", name="I have done it").click()

    summary = _ended(running)
    assert summary["status"] == "succeeded"
    assert '"action": "accept"' in _text(summary)


def test_the_call_page_shows_the_servers_progress_live(login: Callable[..., Page], everything: RunningHost) -> None:
    """server-everything's long-running tool reports each step; its call's page shows them as
    they come (nothing of it is stored), and then the result."""
    page = login()
    tool = "everything__trigger-long-running-operation"
    running = _call(everything, tool, {"duration": 8, "steps": 8})
    page.goto(f"/calls/?tool={tool}")
    row = page.locator("tr.call-row").first
    expect(row).to_have_attribute("data-status", "running")
    row.locator("a").first.click()
    expect(page.locator("html")).to_have_attribute("data-live", "connected")

    expect(page.locator("#call-activity")).to_be_visible()
    expect(page.locator("#call-progress-text")).to_have_text(re.compile(r"^[1-8] of 8$"))
    expect(page.locator("#call-progress-bar")).to_have_attribute("max", "8")

    summary = _ended(running)
    assert summary["status"] == "succeeded"
    expect(page.locator("#call-status")).to_have_text("succeeded")
    expect(page.locator("#call-progress-text")).to_have_text(re.compile(r"^[5-8] of 8$"))
