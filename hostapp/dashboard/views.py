"""What shows every app together: the home dashboard, readiness, metrics, the navigation's counts."""

from __future__ import annotations

import hmac
from collections import Counter
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from hostapp.calls.models import Call
from hostapp.catalog.models import READ_ONLY, Server, live_states
from hostapp.core import processes
from hostapp.core.models import Process, WorkerHeartbeat
from hostapp.gateway.models import AgentToken
from hostapp.outbox.models import Action, Attempt

from . import metrics as prometheus
from .context_processors import navigation

# A worker that has not pinged for this long is shown as missing.
HEARTBEAT_STALE_AFTER = timedelta(seconds=60)


def _per_minute(now: Any) -> dict[str, list[int]]:
    """Calls finished per minute over the last hour, by outcome (succeeded, failed, dead)."""
    start = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    series = {"succeeded": [0] * 60, "failed": [0] * 60, "dead": [0] * 60}

    def slot(minute: Any) -> int:
        return int((minute - start).total_seconds() // 60)

    finished = (
        Call.objects.filter(finished_at__gte=start, status__in=["succeeded", "failed"])
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in finished:
        i = slot(row["minute"])
        if 0 <= i < 60:
            series[row["status"]][i] += row["n"]
    dead = (
        Attempt.objects.filter(finished_at__gte=start, outcome="dead")
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute")
        .annotate(n=Count("id"))
        .order_by()
    )
    for dead_row in dead:
        i = slot(dead_row["minute"])
        if 0 <= i < 60:
            series["dead"][i] += dead_row["n"]
    return series


def _chart(series: dict[str, list[int]], width: int = 720, height: int = 160) -> dict[str, Any]:
    """Polylines for an inline SVG (drawn on the server: no chart library, no script)."""
    top = max([1, *(v for values in series.values() for v in values)])
    step = width / 59
    lines = {}
    for name, values in series.items():
        points = " ".join(f"{i * step:.1f},{height - (v / top) * (height - 10):.1f}" for i, v in enumerate(values))
        lines[name] = points
    return {
        "lines": lines,
        "top": top,
        "width": width,
        "height": height,
        "totals": {k: sum(v) for k, v in series.items()},
    }


# A call a person decided on that ended denied, expired or blocked was not approved; an
# approved one moved on to queued, and from there only on (hostapp/calls/life.py MOVES).
_NOT_APPROVED = (Call.DENIED, Call.EXPIRED, Call.BLOCKED)


def first_steps() -> dict[str, bool]:
    """What a newcomer has done of the Home page's first steps, read from the ledger: one
    cheap `exists()` each (each stops at the first row it finds)."""
    steps = {
        "read_only_call": Call.objects.filter(status=Call.SUCCEEDED, tool_class=READ_ONLY).exists(),
        "approval": Call.objects.filter(decided_at__isnull=False).exclude(status__in=_NOT_APPROVED).exists(),
        "token": AgentToken.objects.exists(),
    }
    return {**steps, "done": all(steps.values())}


def home(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    cutoff = now - HEARTBEAT_STALE_AFTER
    workers = list(WorkerHeartbeat.objects.order_by("hostname"))
    states = Counter(
        (s.state, s.state_word)
        for s in Server.objects.only("pk", "enabled", "transport").prefetch_related(live_states())
    )
    outbox = dict.fromkeys((s for s, _ in Action.STATUSES), 0)
    outbox.update(Action.objects.values("status").annotate(n=Count("id")).values_list("status", "n"))
    alive = Process.objects.filter(seen_at__gte=processes.alive_since()).values_list("role", flat=True)
    context = {
        "processes": sorted(Counter(alive).items()),
        "workers": workers,
        "live_workers": sum(1 for w in workers if w.seen_at >= cutoff),
        "server_states": sorted(states.items()),
        "server_total": sum(states.values()),
        "pending": Call.objects.filter(status=Call.WAITING).count(),
        "outbox": outbox,
        "dead": outbox["dead"] + outbox["unknown"],
        "chart": _chart(_per_minute(now)),
        "first_steps": first_steps(),
    }
    template = "dashboard/_home.html" if request.GET.get("fragment") == "1" else "dashboard/home.html"
    return render(request, template, context)


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving requests (no dependency is checked)."""
    return JsonResponse({"status": "ok"})


@require_GET
def nav_counts(request: HttpRequest) -> JsonResponse:
    context = navigation(request)
    return JsonResponse(
        {
            "pending": context.get("nav_pending", 0),
            "input": context.get("nav_input", 0),
            "dead": context.get("nav_dead", 0),
        }
    )


@login_not_required
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Ready to serve: the database answers, Redis answers, a worker ran a task recently."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # boundary: report, never raise, from a health check
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
        checks["redis"] = "ok"
    except Exception as exc:  # boundary: as above
        checks["redis"] = f"error: {type(exc).__name__}"
    try:
        cutoff = timezone.now() - HEARTBEAT_STALE_AFTER
        fresh = WorkerHeartbeat.objects.filter(seen_at__gte=cutoff).exists()
        checks["worker"] = "ok" if fresh else "no worker heartbeat in the last minute"
    except Exception as exc:  # boundary: as above
        checks["worker"] = f"error: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JsonResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503)


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; for a staff session, or `Authorization: Bearer $PATCHBAY_METRICS_TOKEN`."""
    token = settings.PATCHBAY_METRICS_TOKEN
    auth = request.headers.get("Authorization", "")
    by_token = bool(token) and auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip(), token)
    if not by_token and not (request.user.is_authenticated and request.user.is_staff):
        response = HttpResponse(
            "metrics need a staff session or the metrics token\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="patchbay-metrics"'
        return response
    return HttpResponse(prometheus.render(), content_type=CONTENT_TYPE_LATEST)


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page, with the navigation when it can be had; without it when what failed
    is what the navigation needs (the database, say)."""
    try:
        return render(request, "500.html", status=500)
    except Exception:  # boundary: the page that says something broke must not break as well
        return HttpResponseServerError(loader.get_template("500.html").render())
