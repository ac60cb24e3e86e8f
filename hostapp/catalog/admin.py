from __future__ import annotations

import shlex
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from . import actions
from .forms import ServerForm
from .models import Server, Tool, live_states


class ServerAdminForm(forms.ModelForm):
    """Env and header values are never shown: the admin edits them masked, like the page."""

    url = forms.URLField(required=False, max_length=500, assume_scheme="https", label="URL")

    env_text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Environment",
        help_text=ServerForm.base_fields["env"].help_text,
    )
    headers_text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Headers",
        help_text=ServerForm.base_fields["headers"].help_text,
    )

    class Meta:
        model = Server
        fields = ["name", "transport", "command", "args", "cwd", "url", "trusted", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["env_text"].initial = "\n".join(f"{k}=********" for k in self.instance.env)
            self.fields["headers_text"].initial = "\n".join(f"{k}: ********" for k in self.instance.headers)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # a form's clean() returns its cleaned_data
        helper = ServerForm(
            {
                "name": data.get("name") or self.instance.name,
                "transport": data.get("transport"),
                "command": data.get("command") or "",
                "args": " ".join(shlex.quote(a) for a in (data.get("args") or [])),
                "env": data.get("env_text") or "",
                "cwd": data.get("cwd") or "",
                "url": data.get("url") or "",
                "headers": data.get("headers_text") or "",
                "trusted": data.get("trusted"),
                "enabled": data.get("enabled"),
            },
            instance=self.instance if self.instance.pk else None,
        )
        if not helper.is_valid():
            for field_name, errors in helper.errors.items():
                target = {"env": "env_text", "headers": "headers_text"}.get(field_name, field_name)
                for error in errors:
                    self.add_error(target if target in self.fields else None, error)
        else:
            self.instance.env = helper.cleaned_data["env"]
            self.instance.headers = helper.cleaned_data["headers"]
        return data


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    form = ServerAdminForm
    list_display = ["name", "transport", "state", "protocol_version", "trusted", "enabled", "stale"]
    list_filter = ["transport", "trusted", "enabled"]
    search_fields = ["name", "command", "url"]
    readonly_fields = [
        "state",
        "in_each_process",
        "protocol_version",
        "server_info",
        "capabilities",
        "tools_refreshed_at",
        "stale",
        "refresh_error",
    ]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related(live_states())

    @admin.display(description="in each process")
    def in_each_process(self, server: Server) -> str:
        """What each live process sees of the server (each writes its own)."""
        return (
            format_html_join(
                mark_safe("<br>"),
                "{}: {} {}",
                ((s.process.name, s.state, (s.last_error or {}).get("message", "")) for s in server.process_states),
            )
            or "–"
        )

    def save_model(self, request: HttpRequest, obj: Server, form: Any, change: bool) -> None:
        trust_changed = change and "trusted" in form.changed_data
        actions.save_server(obj, config_changed=True, trust_changed=trust_changed)


class ToolForm(forms.ModelForm):
    """The class and what agents are given; a rename is checked as on the tool's page."""

    class Meta:
        model = Tool
        fields = ["class_override", "agent_name", "agent_description"]

    def clean_agent_name(self) -> str:
        try:
            return actions.check_agent_name(self.instance, self.cleaned_data.get("agent_name") or "")
        except actions.OverrideError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    form = ToolForm
    list_display = ["exposed_name", "agent_name", "server", "effective_class", "class_override", "status"]
    list_filter = ["status", "effective_class", "server"]
    search_fields = ["exposed_name", "original_name", "title", "description"]
    readonly_fields = [
        "server",
        "original_name",
        "exposed_name",
        "name_warning",
        "definition",
        "definition_hash",
        "pinned_definition",
        "pinned_hash",
        "status",
        "quarantine_reason",
        "title",
        "description",
        "text_warning",
        "icons",
        "effective_class",
        "accepted_at",
        "accepted_by",
        "override_at",
        "override_by",
    ]
    fields = ["class_override", "agent_name", "agent_description", *readonly_fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Tool, form: Any, change: bool) -> None:
        actions.set_class_override(obj, obj.class_override)
        if {"agent_name", "agent_description"} & set(form.changed_data):
            actions.set_override(obj, obj.agent_name, obj.agent_description, request.user)
