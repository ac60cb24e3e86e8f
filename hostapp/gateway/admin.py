from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from . import tokens
from .models import AgentToken


class AgentTokenForm(forms.ModelForm):
    class Meta:
        model = AgentToken
        fields = ["servers", "tools", "exclude", "max_class", "no_prefix", "revoked_at"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            view = tokens.make_view(
                data.get("servers"),
                data.get("tools"),
                data.get("exclude"),
                data.get("max_class"),
                no_prefix=bool(data.get("no_prefix")),
            )
        except tokens.TokenError as exc:
            raise forms.ValidationError(str(exc)) from None
        data["servers"], data["tools"], data["exclude"] = list(view.servers), list(view.tools), list(view.exclude)
        data["max_class"] = view.max_class
        return data


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    form = AgentTokenForm
    list_display = ["name", "hint", "servers", "tools", "max_class", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["name", "token_hash", "hint", "created_at", "created_by", "last_used_at"]
    fields = [
        "name",
        "hint",
        "servers",
        "tools",
        "exclude",
        "max_class",
        "no_prefix",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are created on the Agents page or with `mcp token create`, shown once

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        tokens.announce(obj)  # each web process reads its view (or its revocation) again
