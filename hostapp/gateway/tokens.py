"""Agent tokens: create (shown once), revoke, authenticate; how each MCP client is given one."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from hostapp.catalog.models import Server
from hostapp.core.events import send_event_on_commit

from . import agent_view
from .agent_view import AgentInfo, AgentView
from .models import TOKEN_PREFIX, AgentToken, hash_token


class TokenError(ValueError):
    pass


def _servers(servers: list[str] | None) -> list[str]:
    servers = sorted(set(servers or []))
    known = set(Server.objects.filter(name__in=servers).values_list("name", flat=True))
    unknown = [s for s in servers if s not in known]
    if unknown:
        raise TokenError(f"no server named {', '.join(unknown)}")
    return servers


def make_view(
    servers: list[str] | None,
    tools: list[str] | None,
    exclude: list[str] | None,
    max_class: str | None,
    no_prefix: bool = False,
) -> AgentView:
    """A view from what a person gave (CLI options, the Agents page), checked; TokenError if not."""
    try:
        return AgentView(
            tuple(_servers(servers)),
            agent_view.patterns(tools, "tools"),
            agent_view.patterns(exclude, "exclude"),
            agent_view.max_class(max_class),
            bool(no_prefix),
        ).checked()
    except agent_view.ViewError as exc:
        raise TokenError(str(exc)) from None


def _set_view(agent: AgentToken, view: AgentView) -> None:
    agent.servers, agent.tools, agent.exclude = list(view.servers), list(view.tools), list(view.exclude)
    agent.max_class, agent.no_prefix = view.max_class, view.no_prefix


def create_token(
    name: str, servers: list[str] | None = None, user: Any = None, *, view: AgentView | None = None
) -> tuple[AgentToken, str]:
    """A new token for `name` (its view: `view`, or every tool of `servers`); the clear token
    is returned here and never again."""
    view = view if view is not None else make_view(servers, None, None, None)
    if AgentToken.objects.filter(name=name).exists():
        raise TokenError(f"a token named {name!r} exists already; revoke it first or pick another name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    agent = AgentToken(
        name=name,
        token_hash=hash_token(token),
        hint=token[:7],
        created_by=user if getattr(user, "pk", None) else None,
    )
    _set_view(agent, view)
    agent.full_clean()
    with transaction.atomic():
        agent.save()
    return agent, token


def update_view(name: str, view: AgentView) -> AgentToken:
    """The active token `name` sees `view` from now on (each web process hears of it)."""
    with transaction.atomic():
        agent = AgentToken.objects.select_for_update().filter(name=name, revoked_at__isnull=True).first()
        if agent is None:
            raise TokenError(f"no active token named {name!r}")
        _set_view(agent, view)
        agent.save(update_fields=["servers", "tools", "exclude", "max_class", "no_prefix"])
        announce(agent)
    return agent


def announce(agent: AgentToken) -> None:
    """Every web process forgets the tokens it checked lately (hostapp/gateway/asgi.py)."""
    send_event_on_commit("token.changed", {"name": agent.name})


def revoke_token(name: str) -> AgentToken:
    with transaction.atomic():
        agent = AgentToken.objects.select_for_update().filter(name=name, revoked_at__isnull=True).first()
        if agent is None:
            raise TokenError(f"no active token named {name!r}")
        agent.revoked_at = timezone.now()
        agent.save(update_fields=["revoked_at"])
        announce(agent)
    return agent


def current_agents(pks: set[int]) -> dict[int, AgentInfo]:
    """The active agents among `pks`, as their tokens say now (a revoked one is left out)."""
    return {a.pk: a.info for a in AgentToken.objects.filter(pk__in=pks, revoked_at__isnull=True)}


def authenticate(token: str) -> AgentToken | None:
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    agent = AgentToken.objects.filter(token_hash=hash_token(token), revoked_at__isnull=True).first()
    if agent is None:
        return None
    now = timezone.now()
    # Note the use, at most once a minute (no write per request).
    if agent.last_used_at is None or (now - agent.last_used_at).total_seconds() > 60:
        AgentToken.objects.filter(pk=agent.pk).update(last_used_at=now)
    return agent


# --- client configuration -------------------------------------------------------------------

# mcp-remote takes plain http:// only for these hosts (else it wants --allow-http).
_MCP_REMOTE_LOCAL_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Snippet:
    """What to paste into one MCP client to reach the host's endpoint with a token."""

    key: str  # an id for the page (and its tests)
    client: str
    where: str  # where it goes: a terminal, or a configuration file
    text: str
    note: str = ""


def client_snippets(endpoint: str, token: str, name: str = "patchbay") -> list[Snippet]:
    """Ready configuration for the clients people use, for the absolute `/mcp` URL `endpoint`.

    A token is `pb_` and URL-safe base64 (letters, digits, `-`, `_`): it needs no quoting in
    a shell's double quotes, nor any escape in JSON.
    """
    bearer = f"Bearer {token}"
    headers = {"Authorization": bearer}
    bridge = ["mcp-remote", endpoint, "--header", "Authorization:${AUTH_HEADER}"]
    parts = urlsplit(endpoint)
    if parts.scheme == "http" and parts.hostname not in _MCP_REMOTE_LOCAL_HOSTS:
        bridge.append("--allow-http")
    desktop = {"mcpServers": {name: {"command": "npx", "args": bridge, "env": {"AUTH_HEADER": bearer}}}}
    return [
        Snippet(
            "claude-code",
            "Claude Code",
            "in a terminal",
            f'claude mcp add --transport http {name} {endpoint} --header "Authorization: {bearer}"',
        ),
        Snippet(
            "cursor",
            "Cursor",
            "~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
            json.dumps({"mcpServers": {name: {"url": endpoint, "headers": headers}}}, indent=2),
        ),
        Snippet(
            "vscode",
            "VS Code",
            ".vscode/mcp.json in the workspace",
            json.dumps({"servers": {name: {"type": "http", "url": endpoint, "headers": headers}}}, indent=2),
        ),
        Snippet(
            "claude-desktop",
            "Claude Desktop",
            "claude_desktop_config.json (Settings, Developer, Edit Config)",
            json.dumps(desktop, indent=2),
            note=(
                "Claude Desktop's configuration file starts local programs only, and its Connectors "
                "settings take OAuth, not a bearer token: the mcp-remote bridge (Node.js, run by npx) "
                "connects it to this URL and sends the header. The header is passed through an "
                "environment variable because some clients split arguments at spaces."
            ),
        ),
    ]
