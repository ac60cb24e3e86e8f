"""`{{ when|stamp }}`: a moment as people read it, with its time zone, in a `<time>` element
that carries the exact instant (a built-in of every template: see TEMPLATES in settings)."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter(is_safe=True)
def stamp(value: datetime | None, fmt: str = "Y-m-d H:i:s") -> SafeString | str:
    """`fmt`: Django's date format, or "ms" for the time of day to the millisecond."""
    if not isinstance(value, datetime):
        return ""
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    if fmt == "ms":
        shown = f"{dateformat.format(local, 'H:i:s')}.{local.microsecond // 1000:03d}"
    else:
        shown = dateformat.format(local, fmt)
    return format_html(
        '<time datetime="{}">{} {}</time>',
        local.isoformat(timespec="milliseconds"),
        shown,
        dateformat.format(local, "T"),
    )


@register.filter
def pct(value: float | None) -> str:
    """`{{ 0.934|pct }}`: "93%" (a probability, as people read it); "" for none."""
    if value is None:
        return ""
    return f"{round(float(value) * 100)}%"
