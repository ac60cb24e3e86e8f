"""The Agents page (`hostapp.gateway.views.agents`): a token is created with Post/Redirect/Get,
its secret shown once on the page the redirect leads to, beside ready configuration for the
clients people use (`hostapp.gateway.tokens.client_snippets`).

The personas: alice the administrator, olivia the outsider (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from hostapp.catalog.actions import record_tools
from hostapp.catalog.models import Server
from hostapp.gateway.models import AgentToken, hash_token
from hostapp.gateway.tokens import client_snippets
from hostapp.gateway.views import NEW_TOKEN_KEY

TOKEN = re.compile(r'<pre id="new-token-secret" class="secret">(pb_[A-Za-z0-9_-]+)</pre>')


def create(client: Client, name: str = "claude-code", follow: bool = False, **fields: Any) -> Any:
    return client.post(reverse("agents"), {"name": name, **fields}, follow=follow)


def shown_token(page: str) -> str:
    found = TOKEN.search(page)
    assert found, "the page shows no new token"
    return found.group(1)


# --- creating a token ---------------------------------------------------------------------------


def test_creating_a_token_redirects_to_the_agents_page(admin_client: Client) -> None:
    response = create(admin_client)

    assert response.status_code == 302
    assert response["Location"] == reverse("agents")
    assert AgentToken.objects.filter(name="claude-code").count() == 1
    # Nothing of the secret rides on the redirect.
    assert "pb_" not in response["Location"] and not response.content


def test_the_new_token_is_shown_once_on_the_page_the_redirect_leads_to(admin_client: Client) -> None:
    response = create(admin_client, follow=True)

    assert response.redirect_chain == [(reverse("agents"), 302)]
    assert response["Cache-Control"] == "no-store"
    page = response.content.decode()
    token = shown_token(page)
    assert AgentToken.objects.get(name="claude-code").token_hash == hash_token(token)
    assert "Created a token for claude-code. Copy it now: it is not shown again." in page
    assert 'data-copy-target="new-token-secret"' in page and "js/copy.js" in page

    again = admin_client.get(reverse("agents"))
    assert again.status_code == 200
    assert token not in again.content.decode()
    assert 'id="new-token"' not in again.content.decode()
    assert "no-store" not in again.get("Cache-Control", "")
    assert AgentToken.objects.count() == 1


def test_the_session_keeps_the_token_only_encrypted_and_only_until_it_is_shown(admin_client: Client) -> None:
    create(admin_client)
    kept = admin_client.session[NEW_TOKEN_KEY]
    assert kept["name"] == "claude-code"
    assert kept["token"].startswith("enc:v1:") and "pb_" not in kept["token"]

    admin_client.get(reverse("agents"))

    assert NEW_TOKEN_KEY not in admin_client.session


def test_the_page_shows_the_snippets_with_the_absolute_url_and_the_token(admin_client: Client) -> None:
    page = create(admin_client, follow=True).content.decode()
    token = shown_token(page)

    claude_code = (
        f'claude mcp add --transport http patchbay http://testserver/mcp --header "Authorization: Bearer {token}"'
    )
    # Rendered escaped, as text: the double quotes are entities in the markup.
    assert claude_code.replace('"', "&quot;") in page
    for key in ("claude-code", "cursor", "vscode", "claude-desktop"):
        assert f'id="snippet-{key}-text"' in page
        assert f'data-copy-target="snippet-{key}-text"' in page


def test_a_name_taken_already_is_refused_after_the_redirect_too(admin_client: Client) -> None:
    create(admin_client)
    admin_client.get(reverse("agents"))

    response = create(admin_client, follow=True)

    assert response.redirect_chain == [(reverse("agents"), 302)]
    page = response.content.decode()
    assert "a token named &#x27;claude-code&#x27; exists already" in page
    assert 'id="new-token"' not in page
    assert AgentToken.objects.count() == 1


def test_an_invalid_name_creates_nothing(admin_client: Client) -> None:
    response = create(admin_client, name="no spaces please", follow=True)

    assert response.redirect_chain == [(reverse("agents"), 302)]
    assert "Letters, digits" in response.content.decode()
    assert not AgentToken.objects.exists()
    assert NEW_TOKEN_KEY not in admin_client.session


def test_a_token_for_servers_that_do_not_exist_is_refused(admin_client: Client) -> None:
    response = create(admin_client, servers=["nowhere"], follow=True)

    assert "no server named nowhere" in response.content.decode()
    assert not AgentToken.objects.exists()


def test_only_administrators_create_tokens(client: Client, plain_user: Any) -> None:
    client.force_login(plain_user)

    response = create(client)

    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert not AgentToken.objects.exists()


def test_the_endpoint_is_the_public_url_when_one_is_set(admin_client: Client, settings: Any) -> None:
    settings.PATCHBAY_PUBLIC_URL = "https://patchbay.example.com/"

    page = create(admin_client, follow=True).content.decode()

    assert "<code>https://patchbay.example.com/mcp</code>" in page
    assert "http://testserver/mcp" not in page


# --- the snippets -------------------------------------------------------------------------------

URL = "http://127.0.0.1:8000/mcp"
SECRET = "pb_" + "a1B2-c3_" * 5


def snippets(endpoint: str = URL) -> dict[str, str]:
    return {s.key: s.text for s in client_snippets(endpoint, SECRET)}


def test_claude_code_gets_one_command() -> None:
    assert snippets()["claude-code"] == (
        f'claude mcp add --transport http patchbay {URL} --header "Authorization: Bearer {SECRET}"'
    )


def test_cursor_and_vs_code_get_their_own_json() -> None:
    headers = {"Authorization": f"Bearer {SECRET}"}
    assert json.loads(snippets()["cursor"]) == {"mcpServers": {"patchbay": {"url": URL, "headers": headers}}}
    assert json.loads(snippets()["vscode"]) == {
        "servers": {"patchbay": {"type": "http", "url": URL, "headers": headers}}
    }
    assert snippets()["cursor"].startswith('{\n  "mcpServers": {')  # indented, to be read


def test_claude_desktop_goes_through_mcp_remote_with_the_header_from_the_environment() -> None:
    config = json.loads(snippets()["claude-desktop"])
    server = config["mcpServers"]["patchbay"]
    assert server["command"] == "npx"
    assert server["args"] == ["mcp-remote", URL, "--header", "Authorization:${AUTH_HEADER}"]
    assert server["env"] == {"AUTH_HEADER": f"Bearer {SECRET}"}
    (desktop,) = [s for s in client_snippets(URL, SECRET) if s.key == "claude-desktop"]
    assert "mcp-remote" in desktop.note


def test_mcp_remote_is_allowed_plain_http_beyond_localhost_only_when_asked() -> None:
    lan = "http://192.168.1.20:8000/mcp"
    assert json.loads(snippets(lan)["claude-desktop"])["mcpServers"]["patchbay"]["args"][-1] == "--allow-http"
    for endpoint in (URL, "http://localhost:8000/mcp", "https://patchbay.example.com/mcp"):
        assert "--allow-http" not in snippets(endpoint)["claude-desktop"], endpoint


def test_every_snippet_has_the_url_and_the_token() -> None:
    for snippet in client_snippets(URL, SECRET):
        assert URL in snippet.text, snippet.key
        assert SECRET in snippet.text, snippet.key
        assert snippet.client and snippet.where


@pytest.mark.parametrize("key", ["cursor", "vscode", "claude-desktop"])
def test_the_json_snippets_are_valid_json(key: str) -> None:
    json.loads(snippets()[key])


# --- views -----------------------------------------------------------------------------------------


def test_a_token_is_created_with_its_view_and_the_list_says_what_it_sees(admin_client: Client) -> None:
    page = create(
        admin_client, "reader", follow=True, tools="mailbox__*, tasks__list", exclude="*__delete", max_class="read_only"
    ).content.decode()

    agent = AgentToken.objects.get(name="reader")
    assert (agent.servers, agent.tools, agent.exclude, agent.max_class) == (
        [],
        ["mailbox__*", "tasks__list"],
        ["*__delete"],
        "read_only",
    )
    assert "every server; tools mailbox__*, tasks__list; not *__delete; up to read-only" in page


def test_a_view_that_cannot_be_kept_creates_no_token(admin_client: Client) -> None:
    page = create(admin_client, "odd", follow=True, max_class="harmless").content.decode()

    assert not AgentToken.objects.filter(name="odd").exists()
    assert "max class: &#x27;harmless&#x27; is not one of read_only, write, destructive" in page


def test_admin_edits_a_view_checked_as_the_cli_checks_it(admin_client: Client) -> None:
    create(admin_client, "edited")
    agent = AgentToken.objects.get(name="edited")
    url = reverse("admin:gateway_agenttoken_change", args=[agent.pk])
    form = {"servers": "[]", "tools": '["tasks__*"]', "exclude": "[]", "max_class": "write", "revoked_at": ""}

    refused = admin_client.post(url, {**form, "servers": '["no-such-server"]'})
    saved = admin_client.post(url, form)

    assert refused.status_code == 200 and "no server named no-such-server" in refused.content.decode()
    assert saved.status_code == 302
    agent.refresh_from_db()
    assert (agent.tools, agent.max_class) == (["tasks__*"], "write")


def test_the_page_shows_what_each_view_costs_the_model(admin_client: Client) -> None:
    server = Server.objects.create(name="notes", trusted=True, command="/bin/true")
    record_tools(
        server,
        [
            {"name": "read", "description": "Read a note", "inputSchema": {"type": "object"}},
            {"name": "wipe", "description": "Wipe every note", "inputSchema": {"type": "object"}},
        ],
    )
    create(admin_client, "all-notes")
    create(admin_client, "no-wipe", exclude="*wipe")

    page = admin_client.get(reverse("agents")).content.decode()

    sizes = dict(re.findall(r'<details class="view-cost" data-agent="([^"]+)"><summary>([^<]+)</summary>', page))
    assert sizes["all-notes"].startswith("2 tools · ") and sizes["no-wipe"].startswith("1 tool · ")
    assert "<td><code>notes__read</code></td>" in page
    assert "tokens estimated at 4 bytes each" in page
