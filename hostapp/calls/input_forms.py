"""The form a person answers a server's request for input with (hostapp/calls/inputs.py):
Django form fields made at runtime from the requested schema, as `inputs.clean_schema` left
it (a flat object of strings, numbers, booleans and choices), and the answer made back from
what was entered.

Fields are named by position (`field_0`, ...), never by the server's names, which could
clash with the page's own (`action`, the CSRF token). Labels, hints and choice titles are
the server's texts, sanitized when the request was written; the templates escape them
(templates/calls/_input_fields.html draws every field itself: Django's own form rendering
marks help texts safe).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from hostapp.mcp.sanitize import clean_text

from . import inputs

# What a datetime-local input sends (to the minute, or to the second).
DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]
STRING_CAP = 10_000  # a text the schema sets no maximum for


def options(spec: dict[str, Any]) -> list[tuple[str, str]] | None:
    """A single or multiple choice's (value, title) pairs; None for a field that is not one."""
    source = spec["items"] if spec.get("type") == "array" else spec
    if "enum" in source:
        titles = source.get("enumNames") or []
        return [(v, titles[i] if i < len(titles) and titles[i] else v) for i, v in enumerate(source["enum"])]
    for key in ("oneOf", "anyOf"):
        if key in source:
            return [(o["const"], o.get("title") or o["const"]) for o in source[key]]
    return None


def _bounds(low: Any, high: Any, unit: str = "") -> str:
    if low is not None and high is not None:
        return f"{low} to {high}{unit}"
    if low is not None:
        return f"at least {low}{unit}"
    if high is not None:
        return f"at most {high}{unit}"
    return ""


def _limits(spec: dict[str, Any]) -> str:
    """What the field takes, said beside it (the server's description says why)."""
    kind = spec.get("type")
    if kind == "integer":
        return ", ".join(filter(None, ["a whole number", _bounds(spec.get("minimum"), spec.get("maximum"))]))
    if kind == "number":
        return ", ".join(filter(None, ["a number", _bounds(spec.get("minimum"), spec.get("maximum"))]))
    if kind == "array":
        chosen = _bounds(spec.get("minItems"), spec.get("maxItems"))
        return f"choose {chosen}" if chosen else "choose any"
    if kind == "string" and options(spec) is None:
        words = {
            "email": "an email address",
            "uri": "a URI, such as https://example.com/",
            "date": "a date",
            "date-time": f"a date and time ({timezone.get_current_timezone_name()})",
        }
        length = _bounds(spec.get("minLength"), spec.get("maxLength"), " characters")
        return ", ".join(filter(None, [words.get(spec.get("format", ""), ""), length]))
    return ""


def _field(spec: dict[str, Any], required: bool, attrs: dict[str, str]) -> forms.Field:
    """The Django field for one property of the schema."""
    kind = spec.get("type")
    choices = options(spec)
    default = spec.get("default")
    common: dict[str, Any] = {"required": required, "initial": default}
    if kind == "boolean":
        # A checkbox always answers (unticked is false): required means present, not ticked.
        return forms.BooleanField(required=False, initial=default, widget=forms.CheckboxInput(attrs=attrs))
    if kind == "array":
        assert choices is not None  # clean_schema: a multiple choice has enum or anyOf items
        return forms.MultipleChoiceField(choices=choices, widget=forms.CheckboxSelectMultiple(attrs=attrs), **common)
    if kind == "integer":
        return forms.IntegerField(
            min_value=spec.get("minimum"),
            max_value=spec.get("maximum"),
            widget=forms.NumberInput(attrs=attrs),
            **common,
        )
    if kind == "number":
        return forms.FloatField(
            min_value=spec.get("minimum"),
            max_value=spec.get("maximum"),
            widget=forms.NumberInput(attrs={**attrs, "step": "any"}),
            **common,
        )
    if choices is not None:
        blank = ("", "Choose one" if required else "(none)")
        return forms.ChoiceField(choices=[blank, *choices], widget=forms.Select(attrs=attrs), **common)
    lengths: dict[str, Any] = {"min_length": spec.get("minLength"), "max_length": spec.get("maxLength") or STRING_CAP}
    fmt = spec.get("format")
    if fmt == "email":
        return forms.EmailField(widget=forms.EmailInput(attrs=attrs), **lengths, **common)
    if fmt == "date":
        return forms.DateField(widget=forms.DateInput(attrs={**attrs, "type": "date"}, format="%Y-%m-%d"), **common)
    if fmt == "date-time":
        common["initial"] = _local(default)
        return forms.DateTimeField(
            input_formats=DATETIME_FORMATS,
            widget=forms.DateTimeInput(attrs={**attrs, "type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
            **common,
        )
    # A URI may have any scheme (mailto:, urn:): Django's URLField would take only web
    # addresses and add "http://" to the rest; `inputs.check_content` checks it.
    widget = forms.URLInput(attrs=attrs) if fmt == "uri" else forms.TextInput(attrs=attrs)
    return forms.CharField(widget=widget, **lengths, **common)


def _local(value: Any) -> Any:
    """A date-time default (RFC 3339 text) as a datetime-local input shows it: local time."""
    try:
        moment = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None:
        return value
    return timezone.localtime(moment) if timezone.is_aware(moment) else moment


def _answer_value(spec: dict[str, Any], value: Any) -> Any:
    """A cleaned value as the answer carries it (JSON: dates as ISO 8601 text)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if spec.get("type") == "array":
        return list(value)
    return value


class InputForm(forms.Form):
    """One field per property of `schema` (`InputRequest.requested_schema`). Valid only if
    the answer it makes (`content()`) also passes `inputs.check_content`."""

    def __init__(self, schema: dict[str, Any] | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema or {"type": "object", "properties": {}}
        self.names: dict[str, str] = {}  # field name -> the schema's property name
        required = set(self.schema.get("required") or [])
        for index, (name, spec) in enumerate((self.schema.get("properties") or {}).items()):
            key = f"field_{index}"
            self.names[key] = name
            hint = spec.get("description", "")
            limits = _limits(spec)
            described = [f"id_{key}_hint"] if hint else []
            described += [f"id_{key}_limits"] if limits else []
            attrs = {"aria-describedby": " ".join(described)} if described else {}
            field = _field(spec, name in required, attrs)
            field.label = spec.get("title") or clean_text(name, inputs.TEXT_CAP)
            field.help_text = hint
            # Read by the template: what the field takes, its name in the schema, its kind.
            field.limits = limits  # type: ignore[attr-defined]
            field.property_name = clean_text(name, inputs.TEXT_CAP)  # type: ignore[attr-defined]
            field.marked_required = name in required and spec.get("type") != "boolean"  # type: ignore[attr-defined]
            self.fields[key] = field

    def field_for(self, name: str) -> str | None:
        """The form field of a property of the schema."""
        return next((key for key, prop in self.names.items() if prop == name), None)

    def content(self) -> dict[str, Any]:
        """The answer: the schema's names with what was entered; an optional field left
        empty is left out (the server's default then applies), a checkbox is always there."""
        properties = self.schema.get("properties") or {}
        answer: dict[str, Any] = {}
        for key, value in self.cleaned_data.items():
            name = self.names[key]
            if value is None or value == "" or value == []:
                continue
            answer[name] = _answer_value(properties[name], value)
        return answer

    def add_problems(self, problems: list[dict[str, str]]) -> None:
        """`inputs.check_content`'s findings, each next to its field (once per field)."""
        for problem in problems:
            key = self.field_for(problem.get("path", ""))
            if key is not None and key in self.errors:
                continue
            self.add_error(
                key, problem["message"] if key else f"{problem['path'] or 'the answer'}: {problem['message']}"
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.errors:
            self.add_problems(inputs.check_content(self.schema, self.content()))
        return cleaned


def answer_items(schema: dict[str, Any] | None, content: dict[str, Any] | None) -> list[dict[str, str]]:
    """An answer as a page shows it: each field's label and its value, choices by their titles."""
    properties = (schema or {}).get("properties") or {}
    items = []
    for name, value in (content or {}).items():
        spec = properties.get(name) or {}
        titles = dict(options(spec) or []) if spec else {}
        if isinstance(value, list):
            shown = ", ".join(titles.get(v, str(v)) if isinstance(v, str) else str(v) for v in value)
        elif isinstance(value, bool):
            shown = "yes" if value else "no"
        else:
            shown = titles.get(value, str(value)) if isinstance(value, str) else str(value)
        items.append({"label": spec.get("title") or clean_text(name, inputs.TEXT_CAP), "value": shown})
    return items
