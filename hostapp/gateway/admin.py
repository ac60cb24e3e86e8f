from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import AgentToken


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "hint", "servers", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["name", "token_hash", "hint", "created_at", "created_by", "last_used_at"]
    fields = ["name", "hint", "servers", "created_at", "created_by", "last_used_at", "revoked_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are created on the Agents page or with `mcp token create`, shown once
