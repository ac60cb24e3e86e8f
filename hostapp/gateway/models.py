from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from .agent_view import AgentInfo, AgentView

TOKEN_PREFIX = "pb_"


def hash_token(token: str) -> str:
    """Tokens are long random strings: a plain SHA-256 is the right way to store them."""
    return hashlib.sha256(token.encode()).hexdigest()


class AgentToken(models.Model):
    """A bearer token for one agent; only its hash is stored."""

    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", "Letters, digits, '.', '_' and '-'.")],
    )
    token_hash = models.CharField(max_length=64, unique=True)
    # The first characters, to recognise a token in a list (never enough to use it).
    hint = models.CharField(max_length=12)
    # Its view (hostapp/gateway/agent_view.py): the server names this agent may reach (empty:
    # every server), glob patterns of the tools it sees (empty: every tool) and of those it
    # does not, and the highest class it sees (empty: every class).
    servers = models.JSONField(default=list, blank=True)
    tools = models.JSONField(default=list, blank=True)
    exclude = models.JSONField(default=list, blank=True)
    max_class = models.CharField(
        max_length=12,
        blank=True,
        choices=[("read_only", "read-only"), ("write", "write"), ("destructive", "destructive")],
    )
    # Only with exactly one server: its agent is given the server's own tool names.
    no_prefix = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def view(self) -> AgentView:
        return AgentView(
            tuple(self.servers or ()),
            tuple(self.tools or ()),
            tuple(self.exclude or ()),
            self.max_class,
            self.no_prefix,
        )

    @property
    def info(self) -> AgentInfo:
        return AgentInfo(self.pk, self.name, self.view)

    def may_use(self, server_name: str) -> bool:
        return self.view.may_use(server_name)

    def sees_tool(self, tool: object) -> bool:
        return self.view.sees_tool(tool)
