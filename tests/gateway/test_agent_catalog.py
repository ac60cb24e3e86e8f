"""What agents are given of the catalog (hostapp/gateway/agent_catalog.py), from real catalog
rows: an admin's renames and descriptions, a one-server view without the prefix, and what
tells one agent's list change from another's. The endpoint itself: test_agent_views.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from hostapp.catalog import actions
from hostapp.catalog.models import Server, Tool
from hostapp.gateway.agent_catalog import load_catalog
from hostapp.gateway.agent_view import AgentInfo, AgentView
from hostapp.gateway.models import AgentToken
from hostapp.gateway.tokens import TokenError, create_token, make_view
from tests.catalog.conftest import listed, make_server, tool_def

pytestmark = pytest.mark.django_db

EVERYTHING = AgentInfo(1, "every", AgentView())


def _files() -> Server:
    return listed(
        make_server("files", trusted=True),
        tool_def("read", "Read a file", annotations={"readOnlyHint": True}),
        tool_def("write.text", "Write a file"),
        tool_def("stat", "Stat a file", annotations={"readOnlyHint": True}),
    )


def _tool(exposed: str) -> Tool:
    return Tool.objects.select_related("server").get(exposed_name=exposed)


def _names(agent: AgentInfo) -> list[str]:
    return [t.name for t in load_catalog().listed(agent)]


def own(server: str, **view: Any) -> AgentInfo:
    return AgentInfo(2, "own", AgentView((server,), no_prefix=True, **view))


# --- renames and descriptions -----------------------------------------------------------------


def test_a_renamed_tool_is_listed_by_its_new_name_and_calls_the_original() -> None:
    _files()
    actions.set_override(_tool("files__read"), "read_file", "Reads one file; give a path.", None)

    catalog = load_catalog()
    assert _names(EVERYTHING) == ["files__stat", "files__write_text", "read_file"]
    entry = catalog.find(EVERYTHING, "read_file")
    assert entry is not None and entry.exposed_name == "files__read" and entry.original == "read"
    assert entry.tool.description == "Reads one file; give a path."
    assert catalog.find(EVERYTHING, "files__read") is None  # the old name is gone for agents
    # Patterns match the exposed name and the original, as the ledger does; not the rename,
    # which a server can take back (the list and the calls must agree).
    for pattern in ("files__read", "read"):
        assert _names(AgentInfo(3, "p", AgentView(tools=(pattern,)))) == ["read_file"]
    assert _names(AgentInfo(3, "p", AgentView(tools=("read_*",)))) == []


def test_an_override_is_on_record_and_cleared_by_blank_values(admin_user: Any) -> None:
    _files()
    tool = _tool("files__read")
    actions.set_override(tool, "read_file", "Reads\u202e one file.", admin_user)
    tool.refresh_from_db()
    assert (tool.agent_name, tool.agent_description) == ("read_file", "Reads one file.")  # cleaned as a server's
    assert tool.override_by == admin_user and tool.override_at is not None

    actions.set_override(tool, "files__read", "", admin_user)  # the exposed name itself: no rename
    tool.refresh_from_db()
    assert (tool.agent_name, tool.agent_description, tool.override_by, tool.override_at) == ("", "", None, None)
    assert _names(EVERYTHING) == ["files__read", "files__stat", "files__write_text"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("read file", "is not a model-safe name"),
        ("x" * 65, "is not a model-safe name"),
        ("patchbay__call_status", "the host's own"),
        ("files__stat", "agents already see files__stat by that name"),
        ("taken", "agents already see files__stat by that name"),
        ("write_text", "taken in a view of files without the prefix: it is the name of its tool 'write.text'"),
    ],
)
def test_a_rename_that_clashes_or_is_not_model_safe_is_refused_with_the_reason(name: str, reason: str) -> None:
    _files()
    actions.set_override(_tool("files__stat"), "taken", "", None)
    with pytest.raises(actions.OverrideError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        actions.set_override(_tool("files__read"), name, "", None)
    assert _tool("files__read").agent_name == ""


def test_a_rename_a_server_took_back_is_neither_listed_nor_callable_by_it(admin_user: Any) -> None:
    from hostapp.calls import actions as calls
    from hostapp.calls.models import Call

    listed(make_server("mail", trusted=True), tool_def("read", annotations={"readOnlyHint": True}))
    actions.set_override(_tool("mail__read"), "tasks__read", "", None)
    listed(make_server("tasks", trusted=True), tool_def("read", annotations={"readOnlyHint": True}))
    agent = create_token("t", view=AgentView(tools=("tasks__*",)))[0].info
    assert _names(agent) == ["tasks__read"]
    with pytest.raises(calls.CallError):
        calls.start_call("mail__read", {}, calls.Requester(Call.AGENT, "t", agent=agent))
    assert Call.objects.get(tool_name="mail__read").status == Call.BLOCKED  # refused, on record


def test_a_name_a_server_takes_later_wins_over_a_rename() -> None:
    files = _files()
    listed(make_server("mail", trusted=True), tool_def("search"))
    actions.set_override(_tool("mail__search"), "files__find", "", None)
    assert "files__find" in _names(EVERYTHING)

    listed(files, *[tool_def(n) for n in ("read", "write.text", "stat", "find")])  # the server adds `find`
    names = _names(EVERYTHING)
    assert names.count("files__find") == 1 and "mail__search" in names
    assert load_catalog().find(EVERYTHING, "files__find").exposed_name == "files__find"  # type: ignore[union-attr]


def test_a_change_by_the_server_quarantines_a_renamed_tool_and_the_review_shows_both(admin_client: Client) -> None:
    server = listed(make_server("mail"), tool_def("send", "Send an email"))
    actions.accept_tool(_tool("mail__send"), None)
    actions.set_override(_tool("mail__send"), "send_mail", "Sends one email to one person.", None)

    listed(server, tool_def("send", "Send an email to everyone in the address book"))
    tool = _tool("mail__send")
    assert tool.status == Tool.QUARANTINED and tool.agent_name == "send_mail"  # the override stays
    assert "send_mail" not in _names(EVERYTHING)  # quarantined: listed to nobody

    page = admin_client.get(reverse("tool", args=["mail__send"])).content.decode()
    beside = page[page.index('class="override-beside"') :]
    assert "Sends one email to one person." in beside and "Send an email to everyone in the address book" in beside
    review = admin_client.get(reverse("server_review", args=["mail"])).content.decode()
    assert 'class="override-beside"' in review

    actions.accept_tool(_tool("mail__send"), None)
    catalog = load_catalog()
    assert catalog.find(EVERYTHING, "send_mail").tool.description == "Sends one email to one person."  # type: ignore[union-attr]


def test_the_tool_page_saves_an_override_and_says_why_one_is_refused(admin_client: Client, plain_user: Any) -> None:
    _files()
    url = reverse("tool_override", args=["files__read"])
    response = admin_client.post(url, {"agent_name": "read_file", "agent_description": "Read it."}, follow=True)
    page = response.content.decode()
    assert "Agents are now given read_file as an admin wrote it." in page
    assert "the name <code>read_file</code>" in page and "A call of it is a call of <code>files__read</code>" in page

    response = admin_client.post(
        reverse("tool_override", args=["files__stat"]), {"agent_name": "read_file"}, follow=True
    )
    assert "Not changed: &#x27;read_file&#x27; is taken: agents already see files__read by that name" in (
        response.content.decode()
    )
    outsider = Client()
    outsider.force_login(plain_user)
    assert outsider.post(url, {"agent_name": "mine"}).status_code in (302, 403)
    assert _tool("files__read").agent_name == "read_file"


def test_the_admin_checks_a_rename_as_the_tool_page_does(admin_client: Client) -> None:
    _files()
    tool = _tool("files__read")
    url = reverse("admin:catalog_tool_change", args=[tool.pk])
    refused = admin_client.post(url, {"class_override": "", "agent_name": "files__stat", "agent_description": ""})
    assert refused.status_code == 200 and "agents already see files__stat by that name" in refused.content.decode()
    saved = admin_client.post(url, {"class_override": "", "agent_name": "peek", "agent_description": "Peek."})
    assert saved.status_code == 302
    tool.refresh_from_db()
    assert (tool.agent_name, tool.agent_description, tool.override_by.username) == ("peek", "Peek.", "alice")  # type: ignore[union-attr]


# --- one server, without the prefix ----------------------------------------------------------------


def test_a_view_without_the_prefix_lists_the_servers_own_names() -> None:
    _files()
    listed(make_server("mail", trusted=True), tool_def("read"))
    agent = own("files")

    assert _names(agent) == ["read", "stat", "write_text"]  # sanitized only where a name breaks the rule
    catalog = load_catalog()
    entry = catalog.find(agent, "read")
    assert entry is not None and entry.exposed_name == "files__read"  # mail's `read` is not it
    assert catalog.find(agent, "files__read") is None and catalog.find(agent, "mail__read") is None
    assert catalog.find(agent, "write_text").original == "write.text"  # type: ignore[union-attr]
    # Renames apply here too; the view's other parts as well.
    actions.set_override(_tool("files__stat"), "stat_file", "", None)
    assert _names(agent) == ["read", "stat_file", "write_text"]
    assert _names(own("files", max_class="read_only")) == ["read", "stat_file"]


def test_only_a_view_of_exactly_one_server_can_drop_the_prefix() -> None:
    _files()
    listed(make_server("mail"), tool_def("send"))
    for servers in ([], ["files", "mail"]):
        with pytest.raises(TokenError, match="only a view of exactly one server can drop the prefix"):
            make_view(servers, None, None, None, no_prefix=True)
    agent, _ = create_token("proxy", view=make_view(["files"], None, None, None, no_prefix=True))
    assert agent.info.view.unprefixed_server == "files" and "its own names, no prefix" in agent.view.describe()


def test_the_agents_page_edits_a_view(admin_client: Client) -> None:
    _files()
    listed(make_server("mail", trusted=True), tool_def("search"))
    create_token("editor")
    url = reverse("agent_view", args=["editor"])

    page = admin_client.post(url, {"servers": ["files"], "no_prefix": "1"}, follow=True).content.decode()
    assert "editor now sees servers files; its own names, no prefix." in page
    view = AgentToken.objects.get(name="editor").view
    assert view == AgentView(("files",), no_prefix=True)
    assert '<details class="view-cost" data-agent="editor"><summary>3 tools' in page

    page = admin_client.post(url, {"servers": ["files", "mail"], "no_prefix": "1"}, follow=True).content.decode()
    assert "The view of editor is unchanged: no prefix: only a view of exactly one server" in page
    assert AgentToken.objects.get(name="editor").view == view


# --- what tells one agent's change from another's ----------------------------------------------------


def test_a_change_outside_a_view_leaves_its_fingerprint_as_it_was() -> None:
    _files()
    listed(make_server("mail", trusted=True), tool_def("search"), tool_def("send"))
    mail, files, prefixed_files = (
        AgentInfo(1, "m", AgentView(("mail",))),
        own("files"),
        AgentInfo(3, "f", AgentView(("files",))),
    )
    before = load_catalog()

    actions.set_override(_tool("mail__send"), "", "Sends mail (rewritten).", None)
    after = load_catalog()
    assert before.fingerprint(mail) != after.fingerprint(mail)
    assert before.fingerprint(files) == after.fingerprint(files)
    assert before.fingerprint(prefixed_files) == after.fingerprint(prefixed_files)

    actions.set_override(_tool("files__read"), "peek", "", None)  # a rename is a change of the list
    renamed = load_catalog()
    assert after.fingerprint(files) != renamed.fingerprint(files)
    assert after.fingerprint(mail) == renamed.fingerprint(mail)
