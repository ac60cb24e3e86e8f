from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import ApprovalCost, Call, CallEvent, Rule


@admin.register(Rule)
class RuleAdmin(admin.ModelAdmin):
    list_display = ["server_name", "tool_name", "action", "reason", "source", "created_by", "created_at"]
    list_filter = ["action", "server_name"]
    search_fields = ["server_name", "tool_name", "reason"]


@admin.register(ApprovalCost)
class ApprovalCostAdmin(admin.ModelAdmin):
    """What mistakes cost, per tool, server or class; the thresholds they set are on the
    Suggestions page (hostapp/calls/suggest.py). Changes are on record (who, when)."""

    list_display = ["scope", "wrong_allow", "wrong_block", "ask", "act", "note", "updated_by", "updated_at"]
    fields = ["server_name", "tool_name", "tool_class", "wrong_allow", "wrong_block", "ask", "act", "note"]

    def save_model(self, request: HttpRequest, obj: ApprovalCost, form: Any, change: bool) -> None:
        obj.updated_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)


class CallEventInline(admin.TabularInline):
    model = CallEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "actor", "detail"]


@admin.register(Call)
class CallAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "requester_name", "tool_name", "status", "attempts"]
    list_filter = ["status", "requester_kind", "server_name"]
    search_fields = ["tool_name", "requester_name"]
    inlines = [CallEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Call | None = None) -> bool:
        return False
