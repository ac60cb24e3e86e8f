from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from .models import WorkerHeartbeat

# A worker that has not pinged for this long is shown as missing.
HEARTBEAT_STALE_AFTER = timedelta(seconds=60)


def home(request: HttpRequest) -> HttpResponse:
    cutoff = timezone.now() - HEARTBEAT_STALE_AFTER
    workers = list(WorkerHeartbeat.objects.order_by("hostname"))
    return render(
        request,
        "core/home.html",
        {"workers": workers, "live_workers": sum(1 for w in workers if w.seen_at >= cutoff)},
    )


def section(request: HttpRequest, title: str, empty: str) -> HttpResponse:
    """A dashboard section whose app has nothing to show yet."""
    return render(request, "core/section.html", {"title": title, "empty": empty})


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving requests (no dependency is checked)."""
    return JsonResponse({"status": "ok"})


@require_GET
def nav_counts(request: HttpRequest) -> JsonResponse:
    from .context_processors import navigation

    context = navigation(request)
    return JsonResponse({"pending": context.get("nav_pending", 0), "dead": context.get("nav_dead", 0)})
