"""Agent tokens: create (shown once), revoke, authenticate."""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from hostapp.catalog.models import Server
from hostapp.core.events import send_event_on_commit

from .models import TOKEN_PREFIX, AgentToken, hash_token


class TokenError(ValueError):
    pass


def create_token(name: str, servers: list[str] | None = None, user: Any = None) -> tuple[AgentToken, str]:
    """A new token for `name`; the clear token is returned here and never again."""
    servers = sorted(set(servers or []))
    known = set(Server.objects.filter(name__in=servers).values_list("name", flat=True))
    unknown = [s for s in servers if s not in known]
    if unknown:
        raise TokenError(f"no server named {', '.join(unknown)}")
    if AgentToken.objects.filter(name=name).exists():
        raise TokenError(f"a token named {name!r} exists already; revoke it first or pick another name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    agent = AgentToken(
        name=name,
        token_hash=hash_token(token),
        hint=token[:7],
        servers=servers,
        created_by=user if getattr(user, "pk", None) else None,
    )
    agent.full_clean()
    with transaction.atomic():
        agent.save()
    return agent, token


def revoke_token(name: str) -> AgentToken:
    with transaction.atomic():
        agent = AgentToken.objects.select_for_update().filter(name=name, revoked_at__isnull=True).first()
        if agent is None:
            raise TokenError(f"no active token named {name!r}")
        agent.revoked_at = timezone.now()
        agent.save(update_fields=["revoked_at"])
        # Every web process forgets the tokens it checked lately (hostapp/gateway/asgi.py).
        send_event_on_commit("token.changed", {"name": agent.name})
    return agent


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
