"""The Servers page, the Catalog page, the tool page and the server forms (ours and Django's)."""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from hostapp.catalog import actions
from hostapp.catalog.models import READ_ONLY, Server, ServerState, Tool
from hostapp.core import identity
from hostapp.core.models import Process

from .conftest import listed, make_server, tool_def

if TYPE_CHECKING:
    from django.test import Client
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db

SECRET = "tok-1234567890-secret"
HEADER_SECRET = "Bearer abcdefghijklmnop-secret"
XSS_DESCRIPTION = "Reads <script>alert(1)</script> and <img src=x onerror=alert(1)> files"


def body(response: Response) -> str:
    return response.content.decode()


def shown_tools(response: Response) -> list[str]:
    return re.findall(r'data-tool="([^"]+)"', body(response))


def counts_line(response: Response) -> str:
    match = re.search(r'<p class="counts" id="catalog-counts">(.*?)</p>', body(response), re.S)
    assert match, "no counts on the page"
    return re.sub(r"<[^>]+>", "", re.sub(r"\s+", " ", match.group(1))).strip()


def a_catalog() -> None:
    """Two servers: `files` trusted (read-only, write and destructive tools), `mail` not."""
    listed(
        make_server("files", trusted=True),
        tool_def("read", "Read a file from the disk", annotations={"readOnlyHint": True}),
        tool_def("write", "Write a file", annotations={"destructiveHint": False}),
        tool_def("delete", "Delete a file", annotations={"destructiveHint": True}, title="Remove for good"),
    )
    listed(make_server("mail"), tool_def("send", "Send an email"), tool_def("search", "Search the mailbox"))


# --- Servers page ---------------------------------------------------------------------------


def test_it_lists_servers_with_their_tools_reviews_and_errors(plain_client: Client) -> None:
    a_catalog()
    actions.mark_refresh_failed(Server.objects.get(name="mail"), "mail exited during the handshake")

    response = plain_client.get(reverse("servers"))

    assert response.status_code == 200
    page = body(response)
    assert 'id="server-files"' in page and 'id="server-mail"' in page
    assert f'<a href="{reverse("catalog")}?server=files">3</a>' in page
    # The count to review is a link to the review of exactly those tools.
    review = reverse("server_review", args=["mail"])
    assert (
        f'<a href="{reverse("catalog")}?server=mail">2</a> <a class="badge warn" href="{review}">2 to review</a>'
        in page
    )
    listed = plain_client.get(review).content.decode()
    assert listed.count('<section class="card review" data-tool="') == 2
    assert "mail exited during the handshake" in page
    assert "stale" in page
    # Only staff see the add button and the enable switch.
    assert reverse("server_add") not in page
    assert reverse("server_enable", args=["files"]) not in page


def test_it_tells_an_admin_how_to_add_the_first_server(admin_client: Client) -> None:
    page = body(admin_client.get(reverse("servers")))

    assert "No MCP servers are configured yet." in page
    assert reverse("server_add") in page
    assert "mcp import" in page


def test_it_queues_a_refresh_when_the_button_is_pressed(plain_client: Client) -> None:
    make_server("files")

    response = plain_client.post(reverse("server_refresh", args=["files"]), follow=True)

    assert response.redirect_chain == [(reverse("servers"), 302)]
    [message] = [str(m) for m in response.context["messages"]]
    assert "files" in message


def test_it_refuses_a_refresh_by_get(plain_client: Client) -> None:
    make_server("files")

    assert plain_client.get(reverse("server_refresh", args=["files"])).status_code == 405


# --- Catalog page ---------------------------------------------------------------------------


def test_it_lists_every_tool_with_its_counts(plain_client: Client) -> None:
    a_catalog()

    response = plain_client.get(reverse("catalog"))

    assert shown_tools(response) == ["files__delete", "files__read", "files__write", "mail__search", "mail__send"]
    assert counts_line(response) == "5 tools · 1 read-only · 1 write · 3 destructive · 2 quarantined"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("files__re", ["files__read"]),  # exposed name
        ("DISK", ["files__read"]),  # description, any case
        ("for good", ["files__delete"]),  # title
        ("mailbox", ["mail__search"]),
        ("nothing-like-this", []),
    ],
)
def test_it_searches_names_titles_and_descriptions(plain_client: Client, query: str, expected: list[str]) -> None:
    a_catalog()

    response = plain_client.get(reverse("catalog"), {"q": query})

    assert shown_tools(response) == expected
    assert response.context["counts"]["total"] == len(expected)


def test_it_searches_the_original_name_of_a_renamed_tool(plain_client: Client) -> None:
    listed(make_server("files", trusted=True), tool_def("files.read"))

    assert shown_tools(plain_client.get(reverse("catalog"), {"q": "files.read"})) == ["files__files_read"]


@pytest.mark.parametrize(
    ("filters", "expected", "counts"),
    [
        ({"server": "mail"}, ["mail__search", "mail__send"], "2 tools · 0 read-only · 0 write · 2 destructive"),
        ({"class": "read_only"}, ["files__read"], "1 tool · 1 read-only · 0 write · 0 destructive"),
        ({"class": "write"}, ["files__write"], "1 tool · 0 read-only · 1 write · 0 destructive"),
        ({"class": "destructive"}, ["files__delete", "mail__search", "mail__send"], None),
        ({"status": "quarantined"}, ["mail__search", "mail__send"], None),
        ({"status": "active"}, ["files__delete", "files__read", "files__write"], None),
        ({"server": "files", "class": "destructive"}, ["files__delete"], None),
        ({"q": "file", "status": "active", "class": "write"}, ["files__write"], None),
    ],
)
def test_it_filters_by_server_class_and_status(
    plain_client: Client, filters: dict[str, str], expected: list[str], counts: str | None
) -> None:
    a_catalog()

    response = plain_client.get(reverse("catalog"), filters)

    assert shown_tools(response) == expected
    if counts is not None:
        assert counts_line(response).startswith(counts)
    for key, value in filters.items():
        if key != "q":
            assert f'<option value="{value}" selected>' in body(response)


def test_it_renders_only_the_rows_for_a_live_update(plain_client: Client) -> None:
    a_catalog()

    response = plain_client.get(reverse("catalog"), {"fragment": "1", "server": "mail"})

    assert "<html" not in body(response)
    assert shown_tools(response) == ["mail__search", "mail__send"]


def test_it_marks_the_tools_of_a_stale_server(plain_client: Client) -> None:
    a_catalog()
    actions.mark_refresh_failed(Server.objects.get(name="mail"), "gone")

    page = body(plain_client.get(reverse("catalog"), {"server": "mail"}))

    assert page.count('title="The last refresh failed: these are the last good tools">stale</span>') == 2


# --- tool page ------------------------------------------------------------------------------


def annotation_row(page: str, hint: str) -> tuple[str, str]:
    match = re.search(rf"<tr><td><code>{hint}</code></td><td>(.*?)</td><td>(.*?)</td></tr>", page)
    assert match, f"no row for {hint}"
    return match.group(1), match.group(2)


def test_it_shows_the_claimed_and_the_applied_annotations_of_an_untrusted_tool(plain_client: Client) -> None:
    listed(make_server("mail"), tool_def("search", annotations={"readOnlyHint": True, "idempotentHint": True}))

    page = body(plain_client.get(reverse("tool", args=["mail__search"])))

    assert annotation_row(page, "readOnlyHint") == ("true", "false")
    assert annotation_row(page, "destructiveHint") == ('<span class="muted">(unset)</span>', "true")
    assert annotation_row(page, "idempotentHint") == ("true", "false")
    assert annotation_row(page, "openWorldHint") == ('<span class="muted">(unset)</span>', "true")
    assert "The server is not trusted: its annotations are shown but not believed." in page


def test_it_shows_the_believed_annotations_of_a_trusted_tool(plain_client: Client) -> None:
    a_catalog()

    page = body(plain_client.get(reverse("tool", args=["files__read"])))

    assert annotation_row(page, "readOnlyHint") == ("true", "true")
    assert annotation_row(page, "destructiveHint") == ('<span class="muted">(unset)</span>', "true")
    assert '<span class="badge class-read_only">read-only</span>' in page


def test_it_shows_the_input_schema_as_a_tree(plain_client: Client) -> None:
    schema = {
        "type": "object",
        "required": ["to"],
        "properties": {
            "to": {"type": "string", "format": "email", "description": "Who gets it"},
            "priority": {"enum": ["low", "high"]},
            "attachments": {"type": "array", "items": {"$ref": "#/$defs/file"}},
        },
        "$defs": {"file": {"type": "object", "properties": {"path": {"type": "string"}}}},
    }
    listed(make_server("mail", trusted=True), tool_def("send", inputSchema=schema))

    page = body(plain_client.get(reverse("tool", args=["mail__send"])))

    assert '<code class="prop">to</code> <span class="type">string</span> <span class="badge required">' in page
    assert "Who gets it" in page
    assert "format: &quot;email&quot;" in page
    assert "one of: &quot;low&quot;, &quot;high&quot;" in page
    assert '<code class="prop">[items]</code> <span class="type">object (file)</span>' in page
    assert '<code class="prop">path</code>' in page
    assert "No output schema declared." in page


def test_it_shows_what_changed_in_a_quarantined_tool(reviewer_client: Client) -> None:
    server = listed(make_server("files", trusted=True), tool_def("read", "Read a file"))
    listed(server, tool_def("read", "Read a file and send it away"))

    page = body(reviewer_client.get(reverse("tool", args=["files__read"])))

    assert "This tool changed since it was accepted" in page
    # Only the field that changed, its text side by side (not the whole definition as JSON).
    assert page.count('<div class="field-change"') == 1
    assert '<div class="field-change" data-field="description">' in page
    assert (
        '<tr class="diff-changed"><td><pre>Read a file</pre></td><td><pre>Read a file and send it away</pre></td></tr>'
    ) in page
    assert "&quot;description&quot;" not in page.split('id="review"')[1].split("</section>")[0]
    assert "Accept this definition" in page


def test_it_shows_a_new_tool_in_full_for_review(plain_client: Client) -> None:
    listed(make_server("mail"), tool_def("send", "Send an email"))

    page = body(plain_client.get(reverse("tool", args=["mail__send"])))

    assert "New tool from an untrusted server" in page
    # Read as the page reads any tool (description, annotations, arguments), not a JSON wall.
    review = page.split('id="review"')[1].split("</section>")[0]
    assert "Its definition is below" in review and "<table" not in review
    assert '<p class="prewrap">Send an email</p>' in page
    assert "Accept this definition" not in page
    assert "Only users with the review permission can accept it." in page


def test_it_lets_a_reviewer_accept_a_quarantined_tool(reviewer_client: Client) -> None:
    listed(make_server("mail"), tool_def("send", "Send an email"))
    tool = Tool.objects.get(exposed_name="mail__send")

    response = reviewer_client.post(
        reverse("tool_accept", args=["mail__send"]), {"definition_hash": tool.definition_hash}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("tool", args=["mail__send"])
    tool.refresh_from_db()
    assert tool.status == Tool.ACTIVE
    assert tool.accepted_by is not None and tool.accepted_by.username == "rita"


def test_it_forbids_accepting_without_the_review_permission(plain_client: Client) -> None:
    listed(make_server("mail"), tool_def("send", "Send an email"))
    tool = Tool.objects.get(exposed_name="mail__send")

    response = plain_client.post(reverse("tool_accept", args=["mail__send"]), {"definition_hash": tool.definition_hash})

    assert response.status_code == 403
    tool.refresh_from_db()
    assert tool.status == Tool.QUARANTINED


def test_it_refuses_an_acceptance_of_a_definition_that_changed_meanwhile(reviewer_client: Client) -> None:
    server = listed(make_server("mail"), tool_def("send", "v1"))
    seen = Tool.objects.get(exposed_name="mail__send").definition_hash
    listed(server, tool_def("send", "v2 with a hidden instruction"))

    response = reviewer_client.post(reverse("tool_accept", args=["mail__send"]), {"definition_hash": seen}, follow=True)

    assert [str(m) for m in response.context["messages"]] == [
        "The tool changed again while you were reviewing it; review the new definition."
    ]
    tool = Tool.objects.get(exposed_name="mail__send")
    assert tool.status == Tool.QUARANTINED
    assert tool.pinned_hash == ""


def test_it_lets_an_admin_override_the_class_of_a_tool(admin_client: Client, plain_client: Client) -> None:
    listed(make_server("mail"), tool_def("search"))
    url = reverse("tool_class", args=["mail__search"])

    assert plain_client.post(url, {"class_override": READ_ONLY}).status_code == 302  # to the login page
    assert Tool.objects.get(exposed_name="mail__search").effective_class == "destructive"

    response = admin_client.post(url, {"class_override": READ_ONLY}, follow=True)

    assert Tool.objects.get(exposed_name="mail__search").effective_class == READ_ONLY
    page = body(response)
    assert "An admin set this tool's class to read-only." in page
    assert annotation_row(page, "readOnlyHint") == ('<span class="muted">(unset)</span>', "true")


def test_it_answers_404_for_an_unknown_tool(plain_client: Client) -> None:
    assert plain_client.get(reverse("tool", args=["nope__nothing"])).status_code == 404


# --- escaping -------------------------------------------------------------------------------


def test_it_escapes_what_a_server_says_in_the_catalog_and_on_the_tool_page(reviewer_client: Client) -> None:
    schema = {
        "type": "object",
        "properties": {"<svg onload=alert(2)>": {"type": "string", "description": "<script>alert(3)</script>"}},
    }
    listed(
        make_server("evil"),
        tool_def("<script>x</script>", XSS_DESCRIPTION, title="<b>Bold</b> title", inputSchema=schema),
    )
    [exposed] = Tool.objects.values_list("exposed_name", flat=True)

    for response in (
        reviewer_client.get(reverse("catalog")),
        reviewer_client.get(reverse("tool", args=[exposed])),
        reviewer_client.get(reverse("server", args=["evil"])),
    ):
        page = body(response)
        assert response.status_code == 200
        assert "<script>alert" not in page
        assert "<script>x" not in page
        assert "<img src=x" not in page
        assert "<svg onload" not in page
        assert "<b>Bold" not in page
    catalog_page = body(reviewer_client.get(reverse("catalog")))
    assert "&lt;script&gt;alert(1)&lt;/script&gt; and &lt;img src=x onerror=alert(1)&gt;" in catalog_page
    tool_page = body(reviewer_client.get(reverse("tool", args=[exposed])))
    assert "&lt;b&gt;Bold&lt;/b&gt; title" in tool_page
    assert "&lt;svg onload=alert(2)&gt;" in tool_page


def test_it_shows_only_safe_icons(plain_client: Client) -> None:
    icons = [{"src": "javascript:alert(1)"}, {"src": "https://icons.example/ok.png"}]
    listed(make_server("mail", trusted=True), tool_def("send", icons=icons))

    page = body(plain_client.get(reverse("tool", args=["mail__send"])))

    assert '<img class="tool-icon" src="https://icons.example/ok.png"' in page
    assert 'src="javascript:' not in page


# --- query counts ---------------------------------------------------------------------------


def populate(names: list[str], tools_each: int) -> None:
    """Servers with tools of every class and status; the second server is stale. Each is
    seen by two processes, a web process and a worker, which disagree about it."""
    for i, name in enumerate(names):
        definitions = [
            tool_def(f"t{j}", f"Tool {j}", annotations={"readOnlyHint": j % 2 == 0}, title=f"T{j}")
            for j in range(tools_each)
        ]
        server = listed(make_server(name, trusted=i % 2 == 0), *definitions)
        if i == 1:
            actions.mark_refresh_failed(server, "it fell over")
        for role, state in ((identity.WEB, "ready"), (identity.WORKER, "failing")):
            process, _ = Process.objects.get_or_create(
                name=f"{role}@test:1",
                defaults={
                    "role": role,
                    "hostname": "test",
                    "pid": 1,
                    "started_at": timezone.now(),
                    "seen_at": timezone.now(),
                },
            )
            ServerState.objects.create(server=server, process=process, state=state, state_at=timezone.now())


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


# Every page: session, user, and the two navigation badges (waiting calls, outbox problems).
PAGE_QUERIES = 4
# + the counts, the tools with their servers, the server names for the filter
CATALOG_QUERIES = PAGE_QUERIES + 3
# + the servers (without their secrets), what live processes see of them, their tool counts
SERVERS_QUERIES = PAGE_QUERIES + 3


@pytest.mark.parametrize("page", ["catalog", "servers"])
def test_it_takes_as_many_queries_for_50_tools_as_for_5(admin_client: Client, page: str) -> None:
    url = reverse(page)
    populate(["a"], tools_each=5)
    few = queries_for(admin_client, url)
    populate(["b", "c", "d", "e", "f"], tools_each=9)
    assert Tool.objects.count() == 50

    many = queries_for(admin_client, url)

    assert few == many


@pytest.mark.parametrize(("page", "queries"), [("catalog", CATALOG_QUERIES), ("servers", SERVERS_QUERIES)])
def test_it_pins_the_query_count_of_the_list_pages(
    admin_client: Client, django_assert_num_queries: Any, page: str, queries: int
) -> None:
    populate(["a", "b", "c", "d", "e"], tools_each=10)
    assert Tool.objects.filter(status=Tool.QUARANTINED).exists()

    with django_assert_num_queries(queries):
        response = admin_client.get(reverse(page))

    assert response.status_code == 200


# --- adding and editing servers -------------------------------------------------------------


def form_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "files",
        "transport": "stdio",
        "command": "python",
        "args": "-m servers.files --root '/srv/my files'",
        "env": "",
        "cwd": "",
        "url": "",
        "headers": "",
        "enabled": "on",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_it_adds_a_server_from_the_form(admin_client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    response = admin_client.post(reverse("server_add"), form_data(env=f"API_TOKEN={SECRET}\nLOG_LEVEL=debug"))

    assert response.status_code == 302
    assert response["Location"] == reverse("servers")
    server = Server.objects.get(name="files")
    assert server.args == ["-m", "servers.files", "--root", "/srv/my files"]
    assert server.env == {"API_TOKEN": SECRET, "LOG_LEVEL": "debug"}
    assert (server.trusted, server.enabled) == (False, True)
    assert SECRET not in caplog.text


def test_it_adds_an_http_server_from_the_form(admin_client: Client) -> None:
    data = form_data(
        name="remote",
        transport="http",
        command="",
        args="",
        url="https://mcp.example.com/mcp",
        headers=f"Authorization: {HEADER_SECRET}",
        trusted="on",
    )

    assert admin_client.post(reverse("server_add"), data).status_code == 302

    server = Server.objects.get(name="remote")
    assert (server.transport, server.url, server.trusted) == ("http", "https://mcp.example.com/mcp", True)
    assert server.headers == {"Authorization": HEADER_SECRET}


def error_at(response: Response, field: str) -> list[str]:
    """The errors the page shows inside the field's own block."""
    match = re.search(rf'<div class="field has-error" data-for="{field}"[^>]*>(.*?)\n  </div>', body(response), re.S)
    assert match, f"no error shown at {field}"
    return re.findall(r'<div class="error">(.*?)</div>', match.group(1))


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"name": "Bad Name"}, "name", "must be a slug"),
        ({"name": "-files"}, "name", "must be a slug"),
        ({"transport": "http", "command": "", "args": "", "url": ""}, "url", "must be an http:// or https:// URL"),
        ({"transport": "http", "command": "", "args": "", "url": "ftp://x.example/"}, "url", "http:// or https://"),
        ({"command": ""}, "command", "must be a non-empty string"),
        ({"args": "--name 'unclosed"}, "args", "cannot split the arguments"),
        ({"env": "NO_EQUALS_SIGN"}, "env", "line 1: write KEY=value"),
        ({"env": "BAD KEY=v"}, "env", "is not a valid name"),
        ({"env": "API_TOKEN=********"}, "env", "API_TOKEN has no stored value to keep"),
        ({"transport": "http", "url": "https://x.example/mcp", "headers": "Bad"}, "headers", "Name: value"),
    ],
)
def test_it_shows_each_validation_error_at_its_field(
    admin_client: Client, overrides: dict[str, Any], field: str, message: str
) -> None:
    response = admin_client.post(reverse("server_add"), form_data(**overrides))

    assert response.status_code == 200
    assert any(message in error for error in error_at(response, field)), error_at(response, field)
    assert Server.objects.count() == 0


def test_it_refuses_a_second_server_with_the_same_name(admin_client: Client) -> None:
    make_server("files")

    response = admin_client.post(reverse("server_add"), form_data())

    assert error_at(response, "name") == ["A server with this name exists already."]


def test_it_refuses_a_url_for_a_stdio_server(admin_client: Client) -> None:
    response = admin_client.post(reverse("server_add"), form_data(url="https://mcp.example.com/mcp"))

    assert response.status_code == 200
    assert error_at(response, "url")
    assert Server.objects.count() == 0


def test_it_shows_the_whole_reason_for_a_bad_name_with_a_colon(admin_client: Client) -> None:
    response = admin_client.post(reverse("server_add"), form_data(name="a: b"))

    assert error_at(response, "name")[0].startswith("must be a slug")


def test_it_does_not_let_a_plain_user_add_or_change_a_server(plain_client: Client) -> None:
    make_server("files", command="old")

    assert plain_client.get(reverse("server_add")).status_code == 302
    assert plain_client.post(reverse("server_add"), form_data(name="other")).status_code == 302
    response = plain_client.post(reverse("server", args=["files"]), form_data(command="new"))

    assert response.status_code == 403
    assert list(Server.objects.values_list("name", "command")) == [("files", "old")]


def test_it_keeps_a_masked_secret_when_the_server_is_saved_unchanged(admin_client: Client) -> None:
    make_server("files", command="python", env={"API_TOKEN": SECRET})
    form = admin_client.get(reverse("server", args=["files"])).context["form"]
    data = {k: v for k, v in form.initial.items() if v not in (False, None)}
    data.update(command="python3", enabled="on")

    response = admin_client.post(reverse("server", args=["files"]), data)

    assert response.status_code == 302
    server = Server.objects.get(name="files")
    assert server.command == "python3"
    assert server.env == {"API_TOKEN": SECRET}


def test_it_reclassifies_the_tools_when_the_form_makes_the_server_trusted(admin_client: Client) -> None:
    listed(make_server("files", command="python"), tool_def("read", annotations={"readOnlyHint": True}))

    admin_client.post(reverse("server", args=["files"]), form_data(trusted="on"))

    assert Tool.objects.get(exposed_name="files__read").effective_class == READ_ONLY


# --- secrets never shown in full ------------------------------------------------------------


def secret_servers() -> tuple[Server, Server]:
    files = make_server("files", command="python", env={"API_TOKEN": SECRET})
    remote = make_server(
        "remote",
        transport=Server.HTTP,
        command="",
        url="https://mcp.example.com/mcp",
        headers={"Authorization": HEADER_SECRET},
    )
    return files, remote


def assert_no_secret(page: str) -> None:
    for secret in (SECRET, HEADER_SECRET):
        assert secret not in page
        assert secret[4:16] not in page  # not even a long part of it


def test_it_never_shows_a_secret_in_full_on_the_server_pages(admin_client: Client) -> None:
    secret_servers()

    files_page = body(admin_client.get(reverse("server", args=["files"])))
    remote_page = body(admin_client.get(reverse("server", args=["remote"])))
    list_page = body(admin_client.get(reverse("servers")))

    for page in (files_page, remote_page, list_page):
        assert_no_secret(page)
    assert "<code>API_TOKEN=tok…••••</code>" in files_page
    assert "API_TOKEN=********" in files_page  # the form's masked value
    assert "<code>Authorization: Bea…••••</code>" in remote_page


def test_it_never_shows_a_secret_in_full_in_the_django_admin(admin_client: Client) -> None:
    files, remote = secret_servers()

    for server in (files, remote):
        response = admin_client.get(reverse("admin:catalog_server_change", args=[server.pk]))
        assert response.status_code == 200
        assert_no_secret(body(response))
    assert "API_TOKEN=********" in body(admin_client.get(reverse("admin:catalog_server_change", args=[files.pk])))


def admin_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "files",
        "transport": "stdio",
        "command": "python",
        "args": '["-m", "servers.files"]',
        "cwd": "",
        "url": "",
        "enabled": "on",
        "env_text": "",
        "headers_text": "",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def test_it_adds_a_server_in_the_django_admin(admin_client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    response = admin_client.post(reverse("admin:catalog_server_add"), admin_data(env_text=f"API_TOKEN={SECRET}"))

    assert response.status_code == 302, body(response)
    server = Server.objects.get(name="files")
    assert server.args == ["-m", "servers.files"]
    assert server.env == {"API_TOKEN": SECRET}
    assert SECRET not in caplog.text
    # The admin's history names the change, never the values.
    assert SECRET not in body(admin_client.get(reverse("admin:catalog_server_history", args=[server.pk])))


def test_it_keeps_a_masked_secret_when_saved_in_the_django_admin(admin_client: Client) -> None:
    files, _ = secret_servers()

    response = admin_client.post(
        reverse("admin:catalog_server_change", args=[files.pk]),
        admin_data(command="python3", args="[]", env_text="API_TOKEN=********\nEXTRA=1"),
    )

    assert response.status_code == 302, body(response)
    files.refresh_from_db()
    assert files.command == "python3"
    assert files.env == {"API_TOKEN": SECRET, "EXTRA": "1"}


def test_it_shows_a_validation_error_in_the_django_admin(admin_client: Client) -> None:
    response = admin_client.post(reverse("admin:catalog_server_add"), admin_data(transport="http", command=""))

    assert response.status_code == 200
    assert "must be an http:// or https:// URL" in body(response)
    assert Server.objects.count() == 0


class TestImportPage:
    def test_an_import_creates_the_servers_and_shows_their_listing_as_progress(self, admin_client: Client) -> None:
        document = {
            "mcpServers": {
                "alpha": {"command": "alpha-server"},
                "beta": {"url": "https://beta.example/mcp", "headers": {"Authorization": "Bearer b-secret-123456"}},
            }
        }
        response = admin_client.post("/servers/import/", {"document": json.dumps(document)})
        assert response.status_code == 302 and response["Location"] == "/servers/"
        assert set(Server.objects.values_list("name", flat=True)) >= {"alpha", "beta"}
        page = admin_client.get("/servers/").content.decode()
        assert "Imported 2 server(s): created alpha, beta" in page
        assert "Refreshing: 0 of 2 servers" in page  # each imported server's listing, as it progresses
        assert "b-secret-123456" not in page

    def test_a_bad_file_is_refused_whole_with_the_entry_and_field(self, admin_client: Client) -> None:
        document = {"mcpServers": {"good": {"command": "x"}, "bad": {"command": "x", "args": "not-a-list"}}}
        response = admin_client.post("/servers/import/", {"document": json.dumps(document)})
        assert response.status_code == 200
        assert "Nothing was imported: server &#x27;bad&#x27;, field &#x27;args&#x27;" in response.content.decode()
        assert not Server.objects.filter(name__in=["good", "bad"]).exists()

    def test_an_uploaded_file_works_and_non_json_is_explained(self, admin_client: Client) -> None:
        upload = SimpleUploadedFile("mcp.json", b'{"mcpServers": {"gamma": {"command": "g"}}}', "application/json")
        assert admin_client.post("/servers/import/", {"file": upload}).status_code == 302
        assert Server.objects.filter(name="gamma").exists()
        response = admin_client.post("/servers/import/", {"document": "{not json"})
        assert "Not JSON: line 1" in response.content.decode()

    def test_only_staff_may_import(self, client: Client, plain_user: Any) -> None:
        client.force_login(plain_user)
        assert client.post("/servers/import/", {"document": "{}"}).status_code == 302  # to the login page
