"""Personas and builders shared by the catalog tests.

The personas (from tests/conftest.py and here): alice the administrator (superuser and
staff), olivia a plain user, and rita a reviewer who may accept changed or new tools
(the `catalog.review_tool` permission) but is not staff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from hostapp.catalog.models import Server


def tool_def(name: str, description: str = "", annotations: dict[str, Any] | None = None, **extra: Any) -> dict:
    """A tool definition as a server lists it (the dump of an MCP `Tool`)."""
    definition: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if description:
        definition["description"] = description
    if annotations is not None:
        definition["annotations"] = annotations
    definition.update(extra)
    return definition


def make_server(name: str, *, trusted: bool = False, **fields: Any) -> Server:
    """A stdio server row (never started by these tests unless a test says so)."""
    from hostapp.catalog.models import Server

    fields.setdefault("command", "/bin/true")
    return Server.objects.create(name=name, trusted=trusted, **fields)


def listed(server: Server, *definitions: dict) -> Server:
    """Record a complete tool listing for `server` through the real action."""
    from hostapp.catalog import actions

    actions.record_tools(server, list(definitions))
    return server


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """The personas are created with passwords; hashing them for real costs ~0.5 s a test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def reviewer(db: None) -> User:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("rita", "rita@example.com", "rita-password-1")
    user.user_permissions.add(Permission.objects.get(codename="review_tool", content_type__app_label="catalog"))
    return user


def _client_for(user: User) -> Client:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reviewer_client(reviewer: User) -> Client:
    return _client_for(reviewer)


@pytest.fixture
def plain_client(plain_user: User) -> Client:
    return _client_for(plain_user)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The live events the catalog's actions and its state records send (kind, data),
    instead of sending them."""
    from hostapp.catalog import actions, states

    events: list[tuple[str, dict[str, Any]]] = []
    for module in (actions, states):
        monkeypatch.setattr(module, "send_event_on_commit", lambda kind, data: events.append((kind, data)))
    return events
