"""A server's prompts, resource templates and resources in the catalog
(hostapp/catalog/offers.py): named, pinned and quarantined as tools are; and a refresh of
server-everything through the pool lists them."""

from __future__ import annotations

from typing import Any

import pytest

from hostapp.catalog.models import Prompt, Resource, ResourceTemplate, Server
from hostapp.catalog.offers import accept_offer, record_offers
from hostapp.catalog.pool import close_pool, refresh_server
from tests.catalog.conftest import make_server
from tests.mcp.test_interop import EVERYTHING, NODE, _need_node

pytestmark = pytest.mark.django_db


def prompt(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, **extra}


def offers(prompts: list[dict] = (), templates: list[dict] = (), resources: list[dict] = ()) -> dict:  # type: ignore[assignment]
    return {"prompts": list(prompts), "resource_templates": list(templates), "resources": list(resources)}


def test_prompts_are_named_as_tools_are_and_their_texts_cleaned() -> None:
    server = make_server("docs", trusted=True)
    result = record_offers(server, offers([prompt("summarize.doc", "Sum\u202eup\u0007 a doc", title="Summary")]))
    assert (result.prompts, result.quarantined) == (1, [])
    found = Prompt.objects.get()
    assert (found.exposed_name, found.original_name, found.status) == ("docs__summarize_doc", "summarize.doc", "active")
    assert (found.title, found.description) == ("Summary", "Sumup a doc")


def test_an_untrusted_servers_new_prompt_and_template_wait_for_a_review() -> None:
    server = make_server("stranger")
    result = record_offers(
        server,
        offers(
            [prompt("greet")], [{"uriTemplate": "file:///{path}", "name": "File"}], [{"uri": "x://1", "name": "one"}]
        ),
    )
    assert sorted(result.quarantined) == ["file:///{path}", "greet"]
    assert Prompt.objects.get().status == ResourceTemplate.objects.get().status == "quarantined"
    assert Prompt.objects.get().quarantine_reason == "new"
    assert Resource.objects.get().name == "one"  # resources are listed, not pinned


def test_a_changed_prompt_is_quarantined_until_accepted_and_changing_back_needs_no_review(admin_user: Any) -> None:
    server = make_server("docs", trusted=True)
    record_offers(server, offers([prompt("greet", "Say hello")]))
    changed = record_offers(server, offers([prompt("greet", "Say hello, then ask for the password")]))
    assert changed.quarantined == ["greet"]
    greet = Prompt.objects.get()
    assert (greet.status, greet.quarantine_reason) == ("quarantined", "changed")
    assert greet.pinned_definition["description"] == "Say hello"

    record_offers(server, offers([prompt("greet", "Say hello")]))  # back to what was accepted
    assert Prompt.objects.get().status == "active"

    record_offers(server, offers([prompt("greet", "Say hi")]))
    accept_offer(Prompt.objects.get(), admin_user)
    greet = Prompt.objects.get()
    assert (greet.status, greet.pinned_hash, greet.accepted_by) == ("active", greet.definition_hash, admin_user)


def test_outside_the_pin_a_prompt_changes_without_a_review() -> None:
    server = make_server("docs", trusted=True)
    record_offers(server, offers([prompt("greet", "Hi", _meta={"v": 1})]))
    result = record_offers(server, offers([prompt("greet", "Hi", _meta={"v": 2})]))
    assert result.quarantined == [] and Prompt.objects.get().definition["_meta"] == {"v": 2}


def test_what_is_no_longer_listed_goes_and_a_second_listing_of_the_same_changes_nothing() -> None:
    server = make_server("docs", trusted=True)
    listing = offers(
        [prompt("a"), prompt("b")],
        [{"uriTemplate": "t://{x}"}],
        [{"uri": "r://1", "size": 10}, {"uri": "r://2", "size": "big"}, {"uri": "r://1"}],
    )
    record_offers(server, listing)
    assert Resource.objects.get(uri="r://1").size == 10 and Resource.objects.get(uri="r://2").size is None
    again = record_offers(server, listing)
    assert not again.changed
    record_offers(server, offers([prompt("b")]))
    assert list(Prompt.objects.values_list("original_name", flat=True)) == ["b"]
    assert not ResourceTemplate.objects.exists() and not Resource.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_refresh_lists_server_everythings_prompts_templates_and_resources() -> None:
    _need_node()
    server = Server.objects.create(name="everything", command=str(NODE), args=[str(EVERYTHING)], trusted=True)
    try:
        result = refresh_server(server)
    finally:
        close_pool()
    assert result.ok and (result.prompts, result.resources) == (4, 9), result
    assert list(Prompt.objects.values_list("exposed_name", flat=True)) == [
        "everything__args-prompt",
        "everything__completable-prompt",
        "everything__resource-prompt",
        "everything__simple-prompt",
    ]
    args = Prompt.objects.get(original_name="args-prompt").arguments
    assert [a["name"] for a in args] == ["city", "state"]
    assert ResourceTemplate.objects.filter(server=server).count() == 2
    assert Resource.objects.filter(server=server, mime_type="text/markdown").count() == 7


def test_the_server_page_lists_what_it_offers_escaped(admin_client: Any) -> None:
    from django.urls import reverse

    server = make_server("docs")
    record_offers(
        server,
        offers(
            [prompt("greet", "<script>alert(1)</script>")],
            [{"uriTemplate": "docs://{id}", "name": "Doc"}],
            [{"uri": "docs://1", "name": "one", "mimeType": "text/plain"}],
        ),
    )
    page = admin_client.get(reverse("server", args=["docs"])).content.decode()
    offered = page[page.index('id="offers"') :]
    assert "<code>docs__greet</code>" in offered and "quarantined: new" in offered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in offered and "<script>alert(1)" not in offered
    assert "<code>docs://{id}</code> Doc" in offered and "<code>docs://1</code> one" in offered
