from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse
from django.utils.functional import SimpleLazyObject

from hostapp.dashboard.views import server_error

PAGES = ["home", "servers", "catalog", "calls", "pending", "outbox", "dead_letters"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_every_page_redirects_anonymous_visitors_to_login(client: Client, name: str) -> None:
    url = reverse(name)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


@pytest.mark.django_db
def test_admin_requires_login(client: Client) -> None:
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]


@pytest.mark.django_db
def test_login_page_and_healthz_are_public(client: Client) -> None:
    assert client.get(reverse("login")).status_code == 200
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_logging_in_shows_the_navigation(client: Client, plain_user: object) -> None:
    response = client.post(reverse("login"), {"username": "olivia", "password": "olivia-password-1"}, follow=True)
    assert response.status_code == 200
    body = response.content.decode()
    for label, name in [("Servers", "servers"), ("Catalog", "catalog"), ("Calls", "calls"), ("Outbox", "outbox")]:
        assert re.search(rf'<a href="{reverse(name)}"[^>]*>{label}\b', body), label
    assert "olivia" in body


def test_a_wrong_password_is_refused(client: Client, plain_user: object) -> None:
    response = client.post(reverse("login"), {"username": "olivia", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("name", PAGES)
def test_every_section_renders_for_a_logged_in_user(admin_client: Client, name: str) -> None:
    response = admin_client.get(reverse(name))
    assert response.status_code == 200
    assert 'aria-current="page"' in response.content.decode()


def test_logout_needs_a_post_and_ends_the_session(admin_client: Client) -> None:
    response = admin_client.post(reverse("logout"))
    assert response.status_code == 302
    assert admin_client.get(reverse("home")).status_code == 302


def test_a_missing_page_is_a_branded_404_with_the_navigation(client: Client, plain_user: object) -> None:
    client.force_login(plain_user)  # type: ignore[arg-type]
    response = client.get("/calls/999999/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "<title>Not found · Patchbay</title>" in page
    assert 'aria-label="Main"' in page and "Log out" in page
    response = client.get("/no/such/page/")
    assert response.status_code == 404 and "<code>/no/such/page/</code>" in response.content.decode()


def test_an_error_is_a_branded_500_with_the_navigation_when_it_can_be_had(rf: Any, plain_user: Any) -> None:
    request = rf.get("/calls/")
    request.user = plain_user
    for middleware in (SessionMiddleware, MessageMiddleware):  # as a request through the stack has them
        middleware(lambda r: HttpResponse()).process_request(request)
    response = server_error(request)
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page and 'aria-label="Main"' in page
    # When what the navigation needs fails too (the database, for the user), the page still
    # comes, without the navigation.
    broken = rf.get("/calls/")
    broken.user = SimpleLazyObject(lambda: 1 / 0)
    response = server_error(broken)
    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
    assert 'aria-label="Main"' not in response.content.decode()
