"""The navigation every page shows, with the counts of its badges."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest

from hostapp.calls.models import Call, InputRequest
from hostapp.outbox.models import Action

NAVIGATION = (
    ("home", "Home"),
    ("servers", "Servers"),
    ("catalog", "Catalog"),
    ("calls", "Calls"),
    ("pending", "Pending"),
    ("inputs", "Input"),
    ("outbox", "Outbox"),
)


# Pages below a section light up that section in the navigation.
SECTION_OF = {
    "server": "servers",
    "server_add": "servers",
    "tool": "catalog",
    "prompts": "catalog",
    "prompt": "catalog",
    "resources": "catalog",
    "resource": "catalog",
    "resource_templates": "catalog",
    "resource_template": "catalog",
    "reads": "calls",
    "call": "calls",
    "input": "inputs",
    "dead_letters": "outbox",
    "outbox_action": "outbox",
}


def _asking_people() -> tuple[int, int]:
    """Calls waiting for approval, and open requests for input: one query for both badges
    (a UNION of two counts, each on its table's (status, id) index). Each row is named by the
    status it counts, "waiting" and "open"."""
    waiting = Call.objects.filter(status=Call.WAITING).values_list("status").annotate(n=Count("id")).order_by()
    asking = (
        InputRequest.objects.filter(status=InputRequest.OPEN).values_list("status").annotate(n=Count("id")).order_by()
    )
    counts = dict(waiting.union(asking, all=True))
    return counts.get(Call.WAITING, 0), counts.get(InputRequest.OPEN, 0)


def navigation(request: HttpRequest) -> dict[str, Any]:
    match = getattr(request, "resolver_match", None)
    current = SECTION_OF.get(match.url_name, match.url_name) if match else None
    context: dict[str, Any] = {
        "nav_items": NAVIGATION,
        "nav_current": current,
        "four_eyes": settings.PATCHBAY_FOUR_EYES,  # the approval forms say what it means for your own calls
    }
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        # Two queries on indexed columns: the badges for approvals and input, and for dead letters.
        context["nav_pending"], context["nav_input"] = _asking_people()
        context["nav_dead"] = Action.objects.filter(status__in=[Action.DEAD, Action.UNKNOWN]).count()
    return context
