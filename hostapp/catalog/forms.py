from __future__ import annotations

import shlex
from typing import Any

from django import forms
from mcp import UriTemplate

from hostapp.calls.reads import MAX_ARGUMENT_CHARS, MAX_PROMPT_ARGUMENTS
from hostapp.mcp.config import ConfigError, parse_entry
from hostapp.mcp.sanitize import clean_text

from .models import SECRET_MASK, Prompt, Server


def _parse_pairs(text: str, sep: str, label: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            raise forms.ValidationError(f"line {number}: write {label}")
        pairs[key.strip()] = value.strip()
    return pairs


OAUTH_FIELDS = {"clientId": "oauth_client_id", "clientSecret": "oauth_client_secret", "scope": "oauth_scope"}
_OVER_HTTP = (Server.HTTP, Server.SSE)
# The transports a field is for; the form shows the chosen transport's (the others are
# ignored when it is saved). A field not named here is for every transport.
TRANSPORT_OF_FIELD: dict[str, tuple[str, ...]] = {
    "command": (Server.STDIO,),
    "args": (Server.STDIO,),
    "env": (Server.STDIO,),
    "cwd": (Server.STDIO,),
    "url": _OVER_HTTP,
    "headers": _OVER_HTTP,
    "oauth_client_id": _OVER_HTTP,
    "oauth_client_secret": _OVER_HTTP,
    "oauth_scope": _OVER_HTTP,
}


class ServerForm(forms.Form):
    name = forms.CharField(max_length=32, help_text="A slug: lowercase letters, digits and inner hyphens.")
    transport = forms.ChoiceField(choices=Server.TRANSPORTS)
    command = forms.CharField(required=False, max_length=500, help_text="The program to start.")
    args = forms.CharField(required=False, widget=forms.TextInput, help_text="Arguments, as a shell would split them.")
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"KEY=value per line. Stored values show as {SECRET_MASK}; leave them to keep them.",
    )
    cwd = forms.CharField(required=False, max_length=500, label="Working directory")
    url = forms.CharField(required=False, max_length=500, label="URL", help_text="The MCP endpoint.")
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"Name: value per line. Stored values show as {SECRET_MASK}; leave them to keep them.",
    )
    oauth_client_id = forms.CharField(
        required=False,
        max_length=500,
        label="OAuth client id",
        help_text="HTTP behind OAuth, with a client registered beforehand; empty: the host registers itself.",
    )
    oauth_client_secret = forms.CharField(
        required=False,
        max_length=500,
        label="OAuth client secret",
        widget=forms.PasswordInput(render_value=True),
        help_text=f"A stored secret shows as {SECRET_MASK}; leave it to keep it.",
    )
    oauth_scope = forms.CharField(required=False, max_length=500, label="OAuth scope", help_text="Space-separated.")
    trusted = forms.BooleanField(required=False, help_text="Believe its tool annotations.")
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, instance: Server | None = None, **kwargs: Any) -> None:
        self.instance = instance
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": instance.name,
                "transport": instance.transport,
                "command": instance.command,
                "args": shlex.join(instance.args or []),
                "env": "\n".join(f"{k}={SECRET_MASK}" for k in instance.env),
                "cwd": instance.cwd,
                "url": instance.url,
                "headers": "\n".join(f"{k}: {SECRET_MASK}" for k in instance.headers),
                "oauth_client_id": instance.oauth_client_id,
                "oauth_client_secret": SECRET_MASK if instance.oauth_client_secret else "",
                "oauth_scope": instance.oauth_scope,
                "trusted": instance.trusted,
                "enabled": instance.enabled,
            }
        super().__init__(*args, **kwargs)
        if instance is not None:
            self.fields["name"].disabled = True
        for name, field in self.fields.items():
            field.transports = " ".join(TRANSPORT_OF_FIELD.get(name, ()))  # type: ignore[attr-defined]

    def clean_args(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get("args") or "")
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split the arguments: {exc}") from None

    def _keep(self, new: dict[str, str], old: dict[str, str], field_name: str) -> dict[str, str]:
        out = {}
        for key, value in new.items():
            if value == SECRET_MASK:
                if key not in old:
                    raise forms.ValidationError(f"{key} has no stored value to keep; type the value")
                out[key] = old[key]
            else:
                out[key] = value
        return out

    def clean_env(self) -> dict[str, str]:
        pairs = _parse_pairs(self.cleaned_data.get("env") or "", "=", "KEY=value")
        return self._keep(pairs, self.instance.env if self.instance else {}, "env")

    def clean_headers(self) -> dict[str, str]:
        pairs = _parse_pairs(self.cleaned_data.get("headers") or "", ":", "Name: value")
        return self._keep(pairs, self.instance.headers if self.instance else {}, "headers")

    def clean_oauth_client_secret(self) -> str:
        value = self.cleaned_data.get("oauth_client_secret") or ""
        if value == SECRET_MASK:
            if self.instance is None or not self.instance.oauth_client_secret:
                raise forms.ValidationError("no stored secret to keep; type the value")
            return self.instance.oauth_client_secret
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # a form's clean() returns its cleaned_data
        if self.errors:
            return data
        name = self.instance.name if self.instance else data["name"]
        if self.instance is None and Server.objects.filter(name=name).exists():
            self.add_error("name", "A server with this name exists already.")
            return data
        entry: dict[str, Any] = {"trusted": data["trusted"], "enabled": data["enabled"]}
        if data["transport"] == Server.STDIO:
            entry.update(command=data["command"], args=data["args"], env=data["env"])
        else:
            entry.update(url=data["url"], headers=data["headers"], type=data["transport"])
        oauth = {key: data[field] for key, field in OAUTH_FIELDS.items() if data.get(field)}
        if oauth:
            entry["oauth"] = oauth  # a stdio server refuses it, at the field
        # Whatever else was filled in goes along, so that a field that does not fit the
        # transport is an error at that field, never silently dropped.
        for key in ("command", "args", "env", "cwd", "url", "headers"):
            if data.get(key) and key not in entry:
                entry[key] = data[key]
        try:
            self.config = parse_entry(name, entry)
        except ConfigError as exc:
            field_name = OAUTH_FIELDS.get(exc.field.removeprefix("oauth."), exc.field)
            if exc.field == "oauth":
                field_name = "oauth_client_id"
            self.add_error(field_name if field_name in self.fields else None, exc.message)
        return data


# --- filling in what a server offers: a prompt's arguments, a resource template's variables -----


def _described(attrs: dict[str, Any], key: str, hint: str) -> dict[str, Any]:
    """A field's attributes, pointing at its hint if it has one (templates/catalog/_offer_fields.html)."""
    return {**attrs, "aria-describedby": f"id_{key}_hint"} if hint else attrs


class PromptArgumentsForm(forms.Form):
    """One text field per argument the prompt declares (arguments are strings). The fields
    are named by position, never by the server's names; labels and hints are its texts,
    cleaned (the template escapes them)."""

    def __init__(self, prompt: Prompt, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.names: dict[str, str] = {}
        for index, argument in enumerate(prompt.arguments[:MAX_PROMPT_ARGUMENTS]):
            name = argument.get("name")
            if not isinstance(name, str) or not name or name in self.names.values():
                continue
            key = f"arg_{index}"
            self.names[key] = name
            hint = clean_text(argument.get("description") or "")
            self.fields[key] = forms.CharField(
                label=clean_text(name, 200),
                required=bool(argument.get("required")),
                max_length=MAX_ARGUMENT_CHARS,
                strip=False,
                help_text=hint,
                widget=forms.Textarea(attrs=_described({"rows": 1}, key, hint)),
            )

    def arguments(self) -> dict[str, str]:
        """The prompt's arguments by their names; an optional one left empty is not sent."""
        return {self.names[key]: value for key, value in self.cleaned_data.items() if value != ""}


# What a variable's operator does to its value, said beside its field.
OPERATOR_HINTS = {"+": "reserved characters (/ ? #) are kept", "#": "a fragment", "?": "a query parameter"}


class TemplateVariablesForm(forms.Form):
    """One field per variable of an RFC 6570 URI template (the SDK's `UriTemplate` parses
    and expands it): a query variable (`{?a,b}`, `{&c}`) may be left empty, any other is
    needed; an exploded one (`{/path*}`) takes a value per line."""

    def __init__(self, template: UriTemplate, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.template = template
        self.lists: set[str] = set()
        optional = template.query_variable_names
        for variable in template.variables:
            key = f"var_{variable.name}"
            if key in self.fields:
                continue
            help_text = OPERATOR_HINTS.get(variable.operator, "")
            if variable.explode:
                self.lists.add(key)
                help_text = "one value per line"
            attrs = _described({"rows": 2} if variable.explode else {}, key, help_text)
            self.fields[key] = forms.CharField(
                label=variable.name,
                required=variable.name not in optional and variable.operator not in ("?", "&"),
                max_length=2000,
                help_text=help_text,
                widget=forms.Textarea(attrs=attrs) if variable.explode else forms.TextInput(attrs=attrs),
            )

    def uri(self) -> str:
        """The template expanded with the values given (an empty optional one is left out)."""
        values: dict[str, str | list[str]] = {}
        for key, value in self.cleaned_data.items():
            name = key.removeprefix("var_")
            if key in self.lists:
                items = [line.strip() for line in value.splitlines() if line.strip()]
                if items:
                    values[name] = items
            elif value != "" or self.fields[key].required:
                values[name] = value
        return self.template.expand(values)
