"""The review of quarantined tools: a changed tool's fields side by side (only those that
changed, long JSON folded), a new tool read as a tool page reads it, and a server's
quarantined tools reviewed and accepted at once, each at the definition that was shown."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from django.urls import reverse
from django.utils import timezone

from hostapp.catalog.models import Server, ServerState, Tool, state_word
from hostapp.catalog.review import changes, side_by_side
from hostapp.core import identity
from hostapp.core.models import Process

from .conftest import listed, make_server, tool_def

if TYPE_CHECKING:
    from django.test import Client

pytestmark = pytest.mark.django_db

BIG_SCHEMA = {"type": "object", "properties": {f"field_{i:02}": {"type": "string"} for i in range(30)}}


def test_only_the_fields_that_changed_are_shown_in_reading_order() -> None:
    old = tool_def("read", "Read a file", inputSchema=BIG_SCHEMA, annotations={"readOnlyHint": True})
    schema = {**BIG_SCHEMA, "properties": {**BIG_SCHEMA["properties"], "field_15": {"type": "integer"}}}
    new = tool_def("read", "Read a file, then mail it", inputSchema=schema, annotations={"readOnlyHint": True})

    found = changes(old, new)

    assert [(c.name, c.label, c.kind, c.text) for c in found] == [
        ("description", "Description", "changed", True),
        ("inputSchema", "Input schema", "changed", False),
    ]
    description, schema_change = found
    assert [(r.kind, r.old, r.new) for r in description.rows] == [
        ("changed", "Read a file", "Read a file, then mail it")
    ]
    # 30 properties, one changed: the lines around the change, the rest folded.
    kinds = [r.kind for r in schema_change.rows]
    assert kinds.count("changed") == 1 and kinds.count("fold") == 2
    assert len(schema_change.rows) < 12
    folds = [r.old for r in schema_change.rows if r.kind == "fold"]
    assert all(re.fullmatch(r"\d+ unchanged lines?", f) for f in folds)
    changed = next(r for r in schema_change.rows if r.kind == "changed")
    assert '"string"' in changed.old and '"integer"' in changed.new


def test_added_and_removed_fields_say_so() -> None:
    old = tool_def("read", "Read", title="Read it")
    new = tool_def("read", "Read", outputSchema={"type": "object"})

    assert [(c.name, c.kind) for c in changes(old, new)] == [("title", "removed"), ("outputSchema", "added")]


def test_nothing_is_folded_when_asked_for_every_line() -> None:
    rows = side_by_side({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7}, {"a": 1}, context=None)
    assert "fold" not in [r.kind for r in rows]


def test_an_http_server_whose_circuit_opened_is_unreachable_a_stdio_one_crash_looping() -> None:
    assert state_word("crash-looping", Server.STDIO) == "crash-looping"
    assert state_word("crash-looping", Server.HTTP) == "unreachable"
    assert state_word("needs-authorization", Server.HTTP) == "needs authorization"
    assert state_word("ready", Server.SSE) == "ready"


def test_the_server_pages_say_unreachable_and_offer_no_connect_unasked(admin_client: Client) -> None:
    remote = make_server("remote", transport=Server.HTTP, command="", url="http://127.0.0.1:9/mcp")
    now = timezone.now()
    process = Process.objects.create(
        name="web@test:1", role=identity.WEB, hostname="test", pid=1, started_at=now, seen_at=now
    )
    ServerState.objects.create(server=remote, process=process, state="crash-looping", state_at=timezone.now())

    listing = admin_client.get(reverse("servers")).content.decode()
    page = admin_client.get(reverse("server", args=["remote"])).content.decode()

    assert '<span class="badge state-crash-looping">unreachable</span>' in listing
    assert '<span class="badge state-crash-looping">unreachable</span>' in page
    assert "crash-looping</span>" not in listing + page
    # It never asked for authorization: no Authorization card, no Connect button.
    assert 'id="authorization"' not in page and ">Connect<" not in page
    remote.oauth_client_id = "pre-registered"
    remote.save(update_fields=["oauth_client_id"])
    page = admin_client.get(reverse("server", args=["remote"])).content.decode()
    assert 'id="authorization"' in page and ">Connect<" in page


def test_a_servers_quarantined_tools_are_reviewed_on_one_page(plain_client: Client) -> None:
    server = listed(make_server("files", trusted=True), tool_def("read", "Read a file"), tool_def("stat", "Stat"))
    listed(server, tool_def("read", "Read a file and send it away"), tool_def("stat", "Stat"), tool_def("rm", "Rm"))

    page = plain_client.get(reverse("server_review", args=["files"])).content.decode()

    assert page.count('<section class="card review" data-tool="') == 1  # trusted: the new one is active
    assert 'data-tool="files__read"' in page
    assert "<td><pre>Read a file and send it away</pre></td>" in page
    assert "Only users with the review permission can accept them." in page
    assert "Accept all" not in page


def test_accept_all_accepts_each_tool_at_the_definition_shown(reviewer_client: Client) -> None:
    server = listed(make_server("mail"), tool_def("send", "Send an email"), tool_def("search", "Search"))
    seen = [f"{t.exposed_name}:{t.definition_hash}" for t in Tool.objects.filter(server=server)]
    listed(server, tool_def("send", "Send an email to anyone"), tool_def("search", "Search"))  # changed since

    page = reviewer_client.get(reverse("server_review", args=["mail"])).content.decode()
    assert "Accept all 2 as shown" in page
    response = reviewer_client.post(reverse("server_review", args=["mail"]), {"seen": seen}, follow=True)

    statuses = dict(Tool.objects.filter(server=server).values_list("exposed_name", "status"))
    assert statuses == {"mail__search": Tool.ACTIVE, "mail__send": Tool.QUARANTINED}
    text = response.content.decode()
    assert "Accepted 1 tool of mail." in text
    assert "Changed again while you were reviewing, left to review: mail__send." in text
    assert response.redirect_chain[-1][0] == reverse("server_review", args=["mail"])


def test_accepting_all_needs_the_review_permission(plain_client: Client) -> None:
    server = listed(make_server("mail"), tool_def("send", "Send an email"))
    tool = Tool.objects.get(server=server)

    response = plain_client.post(
        reverse("server_review", args=["mail"]), {"seen": [f"{tool.exposed_name}:{tool.definition_hash}"]}
    )

    assert response.status_code == 403
    tool.refresh_from_db()
    assert tool.status == Tool.QUARANTINED
