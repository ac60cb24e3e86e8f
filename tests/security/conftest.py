"""Personas, secrets and the host shared by the security tests.

The personas: alice the administrator (superuser, from tests/conftest.py), april the
approver (a plain user holding `calls.approve_call`), olivia the outsider (a plain user,
from tests/conftest.py), and deploy-bot, an agent with a bearer token.

The secrets every test looks for: a server's environment value and header value, the
agent's token, SECRET_KEY and the metrics token.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .host import SecureHost

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from hostapp.calls.models import Call
    from hostapp.catalog.models import Server

ENV_SECRET = "sk-live-SECRET-value-12345"
HEADER_SECRET = "hdr-SECRET-67890"
HEADER_VALUE = f"Bearer {HEADER_SECRET}"
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


def tool_def(name: str, annotations: dict[str, Any], **extra: Any) -> dict[str, Any]:
    definition: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}, "annotations": annotations}
    definition.update(extra)
    return definition


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


def client_for(user: User, **kwargs: Any) -> Client:
    from django.test import Client

    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def vault(db: None) -> Server:
    """A trusted server (never started) with a secret in its environment and in a header,
    a read-only tool and a destructive one."""
    from hostapp.catalog.actions import record_tools
    from hostapp.catalog.models import Server

    server = Server.objects.create(
        name="vault",
        command="/bin/false",
        env={"API_TOKEN": ENV_SECRET},
        headers={"Authorization": HEADER_VALUE},
        trusted=True,
    )
    record_tools(
        server,
        [
            tool_def("peek", READ_ONLY, description="Look at the vault."),
            tool_def(
                "wipe",
                DESTRUCTIVE,
                description="Erase the vault.",
                inputSchema={"type": "object", "properties": {"disk": {"type": "string"}}},
            ),
        ],
    )
    return server


@pytest.fixture
def agent_token(db: None) -> tuple[Any, str]:
    """deploy-bot's token record and its clear value (shown once, at creation)."""
    from hostapp.gateway.tokens import create_token

    return create_token("deploy-bot")


@pytest.fixture
def waiting_call(vault: Server, agent_token: tuple[Any, str]) -> Call:
    """A call of the destructive `vault__wipe` by deploy-bot, waiting for a person."""
    from hostapp.calls.actions import Requester, start_call
    from hostapp.calls.models import Call

    agent, _ = agent_token
    call = start_call("vault__wipe", {"disk": "sdb"}, Requester(Call.AGENT, agent.name, agent=agent))
    assert call.status == Call.WAITING
    return call


@pytest.fixture(scope="session")
def host_secrets() -> dict[str, str]:
    return {
        "ENV": ENV_SECRET,
        "HEADER": HEADER_VALUE,
        "SECRET_KEY": "sec-" + secrets.token_urlsafe(50),
        "METRICS_TOKEN": "metrics-SECRET-" + secrets.token_urlsafe(16),
    }


@pytest.fixture(scope="session")
def host(tmp_path_factory: pytest.TempPathFactory, host_secrets: dict[str, str]) -> Iterator[SecureHost]:
    """One seeded `manage.py run` for the whole folder (it takes seconds to start)."""
    running = SecureHost(tmp_path_factory.mktemp("secure-host"), host_secrets)
    try:
        running.start()
        yield running
    finally:
        running.stop()
