from __future__ import annotations

from typing import Any

from django.http import HttpRequest

NAVIGATION = (
    ("home", "Home"),
    ("servers", "Servers"),
    ("catalog", "Catalog"),
    ("calls", "Calls"),
    ("outbox", "Outbox"),
)


def navigation(request: HttpRequest) -> dict[str, Any]:
    match = getattr(request, "resolver_match", None)
    current = match.url_name if match else None
    return {"nav_items": NAVIGATION, "nav_current": current}
