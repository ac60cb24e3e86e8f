"""Personas and builders shared by the calls tests.

The personas: alice the administrator (superuser, from tests/conftest.py), april the
approver (a plain user holding `calls.approve_call`), and olivia the outsider (a plain
user without it, from tests/conftest.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import REPO

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from hostapp.catalog.models import Server, Tool

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


def tool_def(name: str, annotations: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A tool definition as a server lists it."""
    definition: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if annotations is not None:
        definition["annotations"] = annotations
    definition.update(extra)
    return definition


def catalog(server_name: str, *definitions: dict[str, Any], trusted: bool = True, **fields: Any) -> Server:
    """A server row (never started) with these tools recorded through the real action."""
    from hostapp.catalog.actions import record_tools
    from hostapp.catalog.models import Server

    fields.setdefault("command", "/bin/true")
    server = Server.objects.create(name=server_name, trusted=trusted, **fields)
    record_tools(server, list(definitions))
    return server


def tool(exposed_name: str) -> Tool:
    from hostapp.catalog.models import Tool

    return Tool.objects.select_related("server").get(exposed_name=exposed_name)


def requester(user: User | None = None, name: str = "cli") -> Any:
    from hostapp.calls.actions import Requester
    from hostapp.calls.models import Call

    return Requester.for_user(user) if user is not None else Requester(Call.CLI, name)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """The personas are made with passwords; the default hasher takes most of a second each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def approver(db: None) -> User:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("april", "april@example.com", "april-password-1")
    user.user_permissions.add(Permission.objects.get(codename="approve_call", content_type__app_label="calls"))
    return user


def client_for(user: User) -> Client:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def approver_client(approver: User) -> Client:
    return client_for(approver)


@pytest.fixture
def outsider_client(plain_user: User) -> Client:
    return client_for(plain_user)


@pytest.fixture
def ops(db: None) -> Server:
    """A trusted server with one tool of each class; the destructive one takes an address."""
    return catalog(
        "ops",
        tool_def("status", READ_ONLY, description="Report the status."),
        tool_def("restart", WRITE, description="Restart the service."),
        tool_def(
            "wipe",
            DESTRUCTIVE,
            description="Erase a disk. Cannot be undone.",
            inputSchema={
                "type": "object",
                "properties": {"disk": {"type": "string"}, "force": {"type": "boolean"}},
                "required": ["disk"],
            },
        ),
    )


@pytest.fixture
def mailbox(transactional_db: None, tmp_path: Path) -> Iterator[Server]:
    """The bundled mailbox server, run for real through this process's pool.

    Tests using it need `django_db(transaction=True)`: the pool's event thread writes
    the server's state from another thread.
    """
    from hostapp.catalog.models import Server
    from hostapp.catalog.pool import close_pool, refresh_server

    server = Server.objects.create(
        name="mailbox",
        transport="stdio",
        command=sys.executable,
        args=["-m", "servers.mailbox", "--data-dir", str(tmp_path)],
        cwd=str(REPO),
        trusted=True,
    )
    try:
        result = refresh_server(server)
        assert result.ok, result.error
        yield server
    finally:
        close_pool()
