"""The Calls pages: the list with filters, a call with its result and history, Pending,
approve/deny over HTTP, and the tool page's call endpoint."""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from hostapp.calls import actions
from hostapp.calls.models import Call, Rule
from hostapp.catalog.actions import record_tools
from hostapp.catalog.models import Server
from hostapp.outbox.models import Action

from .conftest import READ_ONLY, catalog, client_for, requester, tool, tool_def

pytestmark = pytest.mark.django_db

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(b"RIFF$\x00\x00\x00WAVEfmt " + bytes(28)).decode()


def ledger_fields(**fields: Any) -> dict[str, Any]:
    """A finished ledger row's fields, as if a call had run; `fields` override the defaults."""
    values: dict[str, Any] = {
        "requester_kind": Call.USER,
        "requester_name": "olivia",
        "server_name": "ops",
        "tool_name": "ops__status",
        "original_name": "status",
        "tool_class": "read_only",
        "definition_hash": "0" * 64,
        "arguments": {},
        "argument_digest": actions.argument_digest({}),
        "decision": Call.RUN,
        "status": Call.SUCCEEDED,
        "finished_at": timezone.now(),
    }
    return {**values, **fields}


def ledger(**fields: Any) -> Call:
    return Call.objects.create(**ledger_fields(**fields))


def wipe(who: str = "deploy-bot", **arguments: Any) -> Call:
    return actions.start_call("ops__wipe", arguments or {"disk": "sdb"}, requester(name=who))


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# --- the Calls page ---------------------------------------------------------------------------------


def test_the_calls_page_lists_every_call_newest_first(outsider_client: Client) -> None:
    first = ledger(tool_name="ops__status")
    second = ledger(tool_name="ops__restart", status=Call.FAILED, is_error=True)

    response = outsider_client.get("/calls/")

    assert response.status_code == 200
    assert [c.pk for c in response.context["calls"]] == [second.pk, first.pk]
    assert b"ops__restart" in response.content and b"ops__status" in response.content


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", ["mail-failed"]),
        ("server=mail", ["mail-failed", "mail-ok"]),
        ("tool=ops__wipe", ["ops-april"]),
        ("requester=april", ["ops-april"]),
        ("server=mail&status=succeeded", ["mail-ok"]),
        ("server=nowhere", []),
    ],
)
def test_the_calls_page_filters_by_status_server_tool_and_requester(
    outsider_client: Client, query: str, expected: list[str]
) -> None:
    rows = {
        "mail-ok": ledger(server_name="mail", tool_name="mail__read"),
        "mail-failed": ledger(server_name="mail", tool_name="mail__read", status=Call.FAILED),
        "ops-april": ledger(tool_name="ops__wipe", requester_name="april"),
    }
    names = {c.pk: name for name, c in rows.items()}

    response = outsider_client.get(f"/calls/?{query}")

    assert sorted(names[c.pk] for c in response.context["calls"]) == sorted(expected)


def test_the_calls_fragment_is_the_rows_only(outsider_client: Client) -> None:
    ledger()

    response = outsider_client.get("/calls/?fragment=1")

    assert [t.name for t in response.templates][0] == "calls/_call_rows.html"
    assert b"<html" not in response.content
    assert b'class="call-row"' in response.content


def test_the_calls_page_costs_the_same_queries_for_many_calls(outsider_client: Client) -> None:
    ledger()
    with CaptureQueriesContext(connection) as one:
        outsider_client.get("/calls/")
    Call.objects.bulk_create([Call(**ledger_fields(tool_name=f"ops__t{i}")) for i in range(40)])

    with CaptureQueriesContext(connection) as many:
        response = outsider_client.get("/calls/")

    assert len(response.context["calls"]) == 41
    assert len(many) == len(one)


def test_the_pager_keeps_a_requester_filter_with_a_plus_sign(outsider_client: Client) -> None:
    Call.objects.bulk_create([Call(**ledger_fields(requester_name="ops+oncall")) for _ in range(51)])
    first = outsider_client.get("/calls/", {"requester": "ops+oncall"})
    older = re.search(r'<a href="([^"]+)">older', first.content.decode())
    assert older is not None

    second = outsider_client.get("/calls/" + html.unescape(older.group(1)))

    assert len(second.context["calls"]) == 1


def test_the_calls_page_needs_a_login() -> None:
    response = Client().get("/calls/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


# --- a call's page ---------------------------------------------------------------------------------


def test_a_calls_page_shows_the_request_the_decision_and_the_history(
    ops: Server, approver: User, outsider_client: Client
) -> None:
    call = wipe(disk="sdb")
    actions.approve(call.pk, approver)

    response = outsider_client.get(f"/calls/{call.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    assert f"Call #{call.pk}" in page
    assert "deploy-bot (command line)" in page
    assert "ask first: destructive tools need a person&#x27;s approval" in page
    assert "Decided by</dt><dd>april" in page
    assert '<pre id="call-arguments">{\n  &quot;disk&quot;: &quot;sdb&quot;\n}</pre>' in page
    history = [e.kind for e in response.context["events"]]
    assert history == ["created", "approved", "queued"]
    assert response.context["action"] == Action.objects.get()


def test_a_denied_calls_page_shows_who_denied_it_and_why(ops: Server, approver: User, outsider_client: Client) -> None:
    call = wipe()
    actions.deny(call.pk, approver, "Not on Fridays.")

    page = outsider_client.get(f"/calls/{call.pk}/").content.decode()

    assert '<p class="error" id="denial-reason"><strong>Denied</strong> by april: Not on Fridays.</p>' in page
    # Said once: no "Denied error: Denied: ..." box under it.
    assert 'id="call-error"' not in page and "Denied error" not in page
    assert "None: it did not run." in page


def test_an_unknown_call_is_a_404(outsider_client: Client) -> None:
    assert outsider_client.get("/calls/999/").status_code == 404


# --- results ------------------------------------------------------------------------------------------


def result_page(client: Client, call: Call) -> str:
    response = client.get(f"/calls/{call.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_text_result_is_shown(outsider_client: Client) -> None:
    call = ledger(result={"content": [{"type": "text", "text": "All systems nominal."}]})

    assert '<pre class="result-text">All systems nominal.</pre>' in result_page(outsider_client, call)


def test_a_script_in_a_result_is_escaped(outsider_client: Client) -> None:
    call = ledger(result={"content": [{"type": "text", "text": "<script>alert('owned')</script>"}]})

    page = result_page(outsider_client, call)

    assert "<script>alert(" not in page
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page


def test_a_png_image_is_shown_inline(outsider_client: Client) -> None:
    call = ledger(result={"content": [{"type": "image", "mimeType": "image/png", "data": PNG}]})

    page = result_page(outsider_client, call)

    assert f'<img class="result-image" src="data:image/png;base64,{PNG}" alt="image from the tool">' in page


def test_an_svg_image_is_not_shown(outsider_client: Client) -> None:
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>').decode()
    call = ledger(result={"content": [{"type": "image", "mimeType": "image/svg+xml", "data": svg}]})

    page = result_page(outsider_client, call)

    assert "<img" not in page.split('id="call-result"')[1]
    assert "An image (image/svg+xml, " in page and "of a type that is not shown" in page


def test_audio_is_playable(outsider_client: Client) -> None:
    call = ledger(result={"content": [{"type": "audio", "mimeType": "audio/wav", "data": WAV}]})

    assert f'<audio controls src="data:audio/wav;base64,{WAV}"></audio>' in result_page(outsider_client, call)


def test_an_https_resource_link_is_a_safe_link(outsider_client: Client) -> None:
    link = {
        "type": "resource_link",
        "uri": "https://files.example.com/report.pdf",
        "name": "Quarterly report",
        "mimeType": "application/pdf",
        "description": "The Q3 numbers",
    }
    call = ledger(result={"content": [link]})

    page = result_page(outsider_client, call)

    assert (
        '<a href="https://files.example.com/report.pdf" rel="noopener noreferrer nofollow" target="_blank">'
        "Quarterly report</a>" in page
    )
    assert "application/pdf" in page and "The Q3 numbers" in page


def test_a_resource_link_with_another_scheme_is_not_clickable(outsider_client: Client) -> None:
    call = ledger(result={"content": [{"type": "resource_link", "uri": "javascript:alert(1)", "name": "Click"}]})

    page = result_page(outsider_client, call)

    assert 'href="javascript:' not in page
    assert '<code class="small">javascript:alert(1)</code>' in page


def test_an_embedded_text_resource_is_shown(outsider_client: Client) -> None:
    resource = {"uri": "file:///notes/todo.md", "mimeType": "text/markdown", "text": "# Todo\n- ship it"}
    call = ledger(result={"content": [{"type": "resource", "resource": resource}]})

    page = result_page(outsider_client, call)

    assert "Embedded resource <code>file:///notes/todo.md</code> text/markdown" in page
    assert "<pre># Todo\n- ship it</pre>" in page


def test_an_embedded_binary_resource_shows_its_size(outsider_client: Client) -> None:
    resource = {
        "uri": "file:///a.bin",
        "mimeType": "application/octet-stream",
        "blob": base64.b64encode(bytes(3000)).decode(),
    }
    call = ledger(result={"content": [{"type": "resource", "resource": resource}]})

    assert "Binary, 2.9\xa0KB." in result_page(outsider_client, call)


@pytest.fixture
def reporter(db: None) -> Server:
    """A trusted server whose `count` tool declares an output schema."""
    return catalog(
        "stats",
        tool_def(
            "count",
            READ_ONLY,
            outputSchema={"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]},
        ),
    )


def counted(structured: Any) -> Call:
    return ledger(
        server_name="stats",
        tool_name="stats__count",
        original_name="count",
        tool=tool("stats__count"),
        result={"content": [{"type": "text", "text": json.dumps(structured)}], "structuredContent": structured},
    )


def test_structured_content_that_matches_the_output_schema_says_so(reporter: Server, outsider_client: Client) -> None:
    page = result_page(outsider_client, counted({"total": 3}))

    assert "matches the output schema" in page
    assert "does not match" not in page


def test_structured_content_that_breaks_the_output_schema_says_where(reporter: Server, outsider_client: Client) -> None:
    page = result_page(outsider_client, counted({"total": "three"}))

    assert "does not match the output schema" in page
    assert "<li>total: &#x27;three&#x27; is not of type &#x27;integer&#x27;</li>" in page


def test_structured_content_missing_a_required_field_points_at_the_root(
    reporter: Server, outsider_client: Client
) -> None:
    page = result_page(outsider_client, counted({}))

    assert "<li>(root): &#x27;total&#x27; is a required property</li>" in page


def test_a_tool_with_an_invalid_output_schema_does_not_break_the_call_page(outsider_client: Client) -> None:
    catalog(
        "odd",
        tool_def("count", READ_ONLY, outputSchema={"type": "object", "properties": {"n": {"type": "whole number"}}}),
    )
    call = ledger(
        server_name="odd",
        tool_name="odd__count",
        tool=tool("odd__count"),
        result={"content": [], "structuredContent": {"n": 1}},
    )

    assert outsider_client.get(f"/calls/{call.pk}/").status_code == 200


def test_a_tool_error_is_shown_as_the_tools_error(outsider_client: Client) -> None:
    call = ledger(
        status=Call.FAILED,
        is_error=True,
        error={"kind": "tool", "reason": "", "message": "No message with id 'msg-9'.", "transient": False},
        result={"content": [{"type": "text", "text": "No message with id 'msg-9'."}], "isError": True},
    )

    page = result_page(outsider_client, call)

    assert (
        '<div class="tool-error" id="call-error"><strong>The tool reported an error:</strong> '
        "No message with id &#x27;msg-9&#x27;.</div>" in page
    )


def test_a_large_result_is_truncated_with_a_full_download(outsider_client: Client, settings: Any) -> None:
    settings.PATCHBAY_RESULT_DISPLAY_CAP = 1024
    text = "".join(f"line {i:05d}\n" for i in range(1000))
    call = ledger(result={"content": [{"type": "text", "text": text}]})

    response = outsider_client.get(f"/calls/{call.pk}/")
    page = response.content.decode()

    view = response.context["result_view"]
    assert view["truncated"] is True
    assert view["blocks"][0]["text"] == text[:1024]
    assert f"Shown: the first part of {len(text)} characters." in page
    assert "line 00999" not in page
    assert f'<a href="/calls/{call.pk}/result.json">Download the full result (JSON)</a>' in page

    download = outsider_client.get(f"/calls/{call.pk}/result.json")
    assert download["Content-Type"] == "application/json"
    assert download["Content-Disposition"] == f'attachment; filename="call-{call.pk}-result.json"'
    assert json.loads(download.content) == {"content": [{"type": "text", "text": text}]}


def test_a_large_image_is_not_inlined(outsider_client: Client, settings: Any) -> None:
    settings.PATCHBAY_RESULT_DISPLAY_CAP = 1024
    big = base64.b64encode(bytes(3000)).decode()
    call = ledger(result={"content": [{"type": "image", "mimeType": "image/png", "data": big}]})

    page = result_page(outsider_client, call)

    assert big not in page
    assert "too large to show" in page


# --- Pending ------------------------------------------------------------------------------------------


def test_the_pending_page_shows_what_the_approver_needs_to_decide(ops: Server, approver_client: Client) -> None:
    call = wipe(disk="sdb", force=True)
    ledger()  # finished calls are not pending

    response = approver_client.get("/calls/pending/")
    page = response.content.decode()

    assert [r["call"].pk for r in response.context["rows"]] == [call.pk]
    assert "<code>ops__wipe</code>" in page
    assert "on ops" in page
    assert "Erase a disk. Cannot be undone." in page
    assert '<pre class="arguments">{\n  &quot;disk&quot;: &quot;sdb&quot;,\n  &quot;force&quot;: true\n}</pre>' in page
    assert "Asked by <strong>deploy-bot</strong> (command line)" in page
    expires = timezone.localtime(call.approval_expires_at)
    # The moment with its time zone, and the exact instant for the machine.
    assert f"{expires:%H:%M:%S} UTC</time>)" in page
    assert f'<time datetime="{expires.isoformat(timespec="milliseconds")}">' in page
    assert "expires in 14\xa0minutes" in page or "expires in 15\xa0minutes" in page
    assert f'action="/calls/{call.pk}/approve/"' in page
    assert f'action="/calls/{call.pk}/deny/"' in page


def test_an_outsider_sees_pending_calls_without_the_buttons(ops: Server, outsider_client: Client) -> None:
    call = wipe()

    page = outsider_client.get("/calls/pending/").content.decode()

    assert f'data-call="{call.pk}"' in page
    assert "only users with the approve permission can decide" in page
    assert "/approve/" not in page and "/deny/" not in page


def test_the_pending_page_escapes_what_servers_and_callers_wrote(approver_client: Client) -> None:
    catalog("ops", tool_def("wipe", {"destructiveHint": True}, description="<img src=x onerror=alert(1)>"))
    actions.start_call("ops__wipe", {"disk": "</pre><script>alert(2)</script>"}, requester(name="<b>bot</b>"))

    page = approver_client.get("/calls/pending/").content.decode()

    assert "<img src=x" not in page and "<script>alert(2)" not in page and "<b>bot</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in page


def test_the_pending_page_costs_the_same_queries_for_many_calls(ops: Server, approver_client: Client) -> None:
    wipe(disk="a")
    with CaptureQueriesContext(connection) as one:
        approver_client.get("/calls/pending/")
    for i in range(10):
        wipe(disk=f"d{i}")

    with CaptureQueriesContext(connection) as many:
        response = approver_client.get("/calls/pending/")

    assert len(response.context["rows"]) == 11
    assert len(many) == len(one)


def test_the_pending_page_lists_the_oldest_first(ops: Server, approver_client: Client) -> None:
    first, second = wipe(disk="a"), wipe(disk="b")

    response = approver_client.get("/calls/pending/?fragment=1")

    assert [r["call"].pk for r in response.context["rows"]] == [first.pk, second.pk]
    assert b"<html" not in response.content


def test_the_pending_badge_counts_waiting_calls(ops: Server, outsider_client: Client) -> None:
    wipe(disk="a")
    wipe(disk="b")

    assert outsider_client.get("/calls/").context["nav_pending"] == 2


# --- approve and deny over HTTP -------------------------------------------------------------------------


def test_an_approver_approves_over_http(ops: Server, approver_client: Client) -> None:
    call = wipe()

    response = approver_client.post(f"/calls/{call.pk}/approve/", {"always": "0"}, follow=True)

    assert response.redirect_chain == [("/calls/pending/", 302)]
    assert messages_of(response) == [f"Approved call #{call.pk}."]
    assert Call.objects.get(pk=call.pk).status == Call.QUEUED
    assert Action.objects.filter(call_id=call.pk).exists()
    assert not Rule.objects.exists()


def test_an_approver_approves_and_always_allows_over_http(ops: Server, approver_client: Client) -> None:
    call = wipe()

    response = approver_client.post(
        f"/calls/{call.pk}/approve/", {"always": "1", "next": f"/calls/{call.pk}/"}, follow=True
    )

    assert response.redirect_chain == [(f"/calls/{call.pk}/", 302)]
    assert messages_of(response) == [f"Approved call #{call.pk} and always allowed this tool."]
    assert Rule.objects.get().action == Rule.ALLOW


def test_an_admin_may_approve(ops: Server, admin_client: Client) -> None:
    call = wipe()

    admin_client.post(f"/calls/{call.pk}/approve/")

    assert Call.objects.get(pk=call.pk).decided_by_name == "alice"


def test_an_outsider_cannot_approve_over_http(ops: Server, outsider_client: Client) -> None:
    call = wipe()

    response = outsider_client.post(f"/calls/{call.pk}/approve/", {"always": "1"})

    assert response.status_code == 403
    assert Call.objects.get(pk=call.pk).status == Call.WAITING
    assert not Action.objects.exists() and not Rule.objects.exists()


def test_an_outsider_cannot_deny_over_http(ops: Server, outsider_client: Client) -> None:
    call = wipe()

    response = outsider_client.post(f"/calls/{call.pk}/deny/", {"reason": "mine now"})

    assert response.status_code == 403
    assert Call.objects.get(pk=call.pk).status == Call.WAITING


def test_an_anonymous_visitor_is_sent_to_log_in_and_nothing_is_decided(ops: Server) -> None:
    call = wipe()

    response = Client().post(f"/calls/{call.pk}/approve/")

    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert Call.objects.get(pk=call.pk).status == Call.WAITING


def test_approving_over_http_needs_the_csrf_token(ops: Server, approver: User) -> None:
    call = wipe()
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)

    response = client.post(f"/calls/{call.pk}/approve/")

    assert response.status_code == 403
    assert Call.objects.get(pk=call.pk).status == Call.WAITING


def test_approving_takes_a_post(ops: Server, approver_client: Client) -> None:
    call = wipe()

    assert approver_client.get(f"/calls/{call.pk}/approve/").status_code == 405
    assert Call.objects.get(pk=call.pk).status == Call.WAITING


def test_approving_a_call_twice_over_http_says_why_not(ops: Server, approver_client: Client) -> None:
    call = wipe()
    approver_client.post(f"/calls/{call.pk}/approve/", follow=True)

    response = approver_client.post(f"/calls/{call.pk}/approve/", follow=True)

    assert messages_of(response) == [f"call #{call.pk} is queued, not waiting for approval"]
    assert Action.objects.count() == 1


def test_approving_an_unknown_call_is_a_404(approver_client: Client) -> None:
    assert approver_client.post("/calls/999/approve/").status_code == 404
    assert approver_client.post("/calls/999/deny/", {"reason": "x"}).status_code == 404


def test_an_approver_denies_over_http_with_a_reason(ops: Server, approver_client: Client) -> None:
    call = wipe()

    response = approver_client.post(f"/calls/{call.pk}/deny/", {"reason": "Wrong disk."}, follow=True)

    assert messages_of(response) == [f"Denied call #{call.pk}."]
    call = Call.objects.get(pk=call.pk)
    assert (call.status, call.denial_reason, call.error["message"]) == (
        Call.DENIED,
        "Wrong disk.",
        "Denied: Wrong disk.",
    )


def test_a_denial_without_a_reason_is_refused_over_http(ops: Server, approver_client: Client) -> None:
    call = wipe()

    response = approver_client.post(f"/calls/{call.pk}/deny/", {"reason": " "}, follow=True)

    assert messages_of(response) == ["a denial needs a reason: the caller receives it"]
    assert Call.objects.get(pk=call.pk).status == Call.WAITING


def test_approving_does_not_redirect_to_another_site(ops: Server, approver_client: Client) -> None:
    call = wipe()

    response = approver_client.post(f"/calls/{call.pk}/approve/", {"next": "https://evil.example/phish"})

    assert response.status_code == 302
    assert not response["Location"].startswith("https://evil.example")


# --- calling a tool from its page ---------------------------------------------------------------------------


def post_call(client: Client, name: str, arguments: str, as_json: bool = True) -> Any:
    headers = {"Accept": "application/json"} if as_json else {}
    return client.post(f"/catalog/{name}/call/", {"arguments": arguments}, headers=headers)


@pytest.fixture
def mailer(db: None) -> Server:
    """A trusted server whose `send` tool has a nested, constrained input schema."""
    return catalog(
        "mail",
        tool_def(
            "send",
            {"destructiveHint": True},
            inputSchema={
                "type": "object",
                "properties": {
                    "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
                    "subject": {"type": "string", "maxLength": 20},
                    "options": {"type": "object", "properties": {"priority": {"enum": ["low", "high"]}}},
                },
                "required": ["to", "subject"],
                "additionalProperties": False,
            },
        ),
    )


def test_invalid_arguments_come_back_with_the_path_of_each_field(mailer: Server, outsider_client: Client) -> None:
    arguments = {"to": ["lee@example.com", "not-an-address"], "subject": "x" * 21, "options": {"priority": "urgent"}}

    response = post_call(outsider_client, "mail__send", json.dumps(arguments))

    assert response.status_code == 400
    body = response.json()
    assert {e["path"] for e in body["errors"]} == {"to/1", "subject", "options/priority"}
    assert body["error"].startswith("invalid arguments at ")
    assert not Call.objects.exists()


def test_a_missing_required_field_and_an_unknown_one_are_reported_at_the_root(
    mailer: Server, outsider_client: Client
) -> None:
    response = post_call(outsider_client, "mail__send", json.dumps({"to": ["lee@example.com"], "cc": "x"}))

    assert response.status_code == 400
    assert sorted(response.json()["errors"], key=lambda e: e["message"]) == [
        {"path": "", "message": "'subject' is a required property"},
        {"path": "", "message": "Additional properties are not allowed ('cc' was unexpected)"},
    ]


def test_arguments_that_are_not_json_are_refused(mailer: Server, outsider_client: Client) -> None:
    response = post_call(outsider_client, "mail__send", '{"to": [')

    assert response.status_code == 400
    assert response.json()["error"].startswith("the arguments are not valid JSON: Expecting value at line 1")
    assert not Call.objects.exists()


def test_arguments_must_be_an_object(mailer: Server, outsider_client: Client) -> None:
    response = post_call(outsider_client, "mail__send", "[1, 2]")

    assert response.status_code == 400
    assert response.json()["errors"] == [{"path": "", "message": "arguments must be a JSON object"}]


def test_valid_arguments_start_the_call_and_answer_its_summary(mailer: Server, outsider_client: Client) -> None:
    arguments = {"to": ["lee@example.com"], "subject": "Hello"}

    response = post_call(outsider_client, "mail__send", json.dumps(arguments))

    assert response.status_code == 200
    call = Call.objects.get()
    body = response.json()
    assert body["call_id"] == call.pk and body["url"] == f"/calls/{call.pk}/"
    assert (body["status"], body["tool"]) == (Call.WAITING, "mail__send")
    assert (call.requester_kind, call.requester_name, call.arguments) == (Call.USER, "olivia", arguments)


def test_a_plain_form_post_redirects_to_the_call(mailer: Server, outsider_client: Client) -> None:
    response = post_call(
        outsider_client, "mail__send", json.dumps({"to": ["a@b.example"], "subject": "Hi"}), as_json=False
    )

    assert response.status_code == 302
    assert response["Location"] == f"/calls/{Call.objects.get().pk}/"


def test_a_plain_form_post_with_invalid_arguments_goes_back_to_the_tool_with_the_error(
    mailer: Server, outsider_client: Client
) -> None:
    response = outsider_client.post(
        "/catalog/mail__send/call/", {"arguments": '{"to": [], "subject": "Hi"}'}, follow=True
    )

    assert response.redirect_chain == [("/catalog/mail__send/", 302)]
    assert messages_of(response) == ["invalid arguments at to: [] should be non-empty"]


def test_a_blocked_tool_answers_the_rules_reason(mailer: Server, outsider_client: Client) -> None:
    Rule.objects.create(server_name="mail", tool_name="", action=Rule.BLOCK, reason="Mail is read-only this week.")

    body = post_call(outsider_client, "mail__send", json.dumps({"to": ["a@b.example"], "subject": "Hi"})).json()

    assert (body["status"], body["is_error"]) == (Call.BLOCKED, True)
    assert body["error"] == {"kind": "policy", "message": "Mail is read-only this week."}


def test_a_quarantined_tool_is_not_called(outsider_client: Client) -> None:
    server = catalog("mail", tool_def("send"), trusted=False)
    record_tools(server, [tool_def("send")])

    body = post_call(outsider_client, "mail__send", "{}").json()

    assert body["status"] == Call.BLOCKED
    assert "quarantined" in body["error"]["message"]


def test_calling_an_unknown_tool_is_a_404(outsider_client: Client) -> None:
    assert post_call(outsider_client, "mail__nothing", "{}").status_code == 404


def test_calling_takes_a_post(mailer: Server, outsider_client: Client) -> None:
    assert outsider_client.get("/catalog/mail__send/call/").status_code == 405


def test_an_approver_sees_the_decide_buttons_on_a_waiting_calls_page(
    ops: Server, approver: User, plain_user: User
) -> None:
    call = wipe()

    approver_page = client_for(approver).get(f"/calls/{call.pk}/").content.decode()
    outsider_page = client_for(plain_user).get(f"/calls/{call.pk}/").content.decode()

    assert f'action="/calls/{call.pk}/approve/"' in approver_page
    assert "Waiting for approval" in outsider_page and "/approve/" not in outsider_page
