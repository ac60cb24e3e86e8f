from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import AuthorizationFlow, Credential


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    """Status only: tokens and registrations are never shown."""

    list_display = ("server", "status", "scope", "expires_at", "refreshed_at", "connected_at")
    list_filter = ("status",)
    fields = ("server", "status", "reason", "scope", "required_scope", "expires_at", "refreshed_at", "refreshes")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(AuthorizationFlow)
class AuthorizationFlowAdmin(admin.ModelAdmin):
    list_display = ("server", "status", "started_by", "created_at", "error")
    fields = ("server", "status", "started_by", "created_at", "updated_at", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
