"""Prometheus metrics: the database is counted at scrape time; latency is this process's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse

# Request latency buckets (seconds) for the web process's own histogram.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.lock = threading.Lock()
        self.series: dict[tuple[tuple[str, str], ...], list[float]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self.lock:
            row = self.series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    row[i] += 1
            row[-2] += 1  # count
            row[-1] += value  # sum

    def render(self, name: str) -> Iterable[str]:
        with self.lock:
            items = [(k, list(v)) for k, v in self.series.items()]
        for key, row in items:
            base = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
            sep = "," if base else ""
            for i, bound in enumerate(self.buckets):
                yield f'{name}_bucket{{{base}{sep}le="{bound}"}} {row[i]:g}'
            yield f'{name}_bucket{{{base}{sep}le="+Inf"}} {row[-2]:g}'
            yield f"{name}_count{{{base}}} {row[-2]:g}"
            yield f"{name}_sum{{{base}}} {row[-1]:.6f}"


REQUEST_LATENCY = Histogram(BUCKETS)


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class LatencyMiddleware:
    """Times every request by its URL pattern (not its path: no unbounded labels)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "(unmatched)"
        REQUEST_LATENCY.observe(
            time.perf_counter() - started,
            route=route,
            method=request.method or "",
            status=str(response.status_code // 100) + "xx",
        )
        return response


def _metric(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def render() -> str:
    from hostapp.calls.models import Call
    from hostapp.catalog.models import Server, Tool
    from hostapp.core.models import WorkerHeartbeat
    from hostapp.outbox.models import Action

    lines: list[str] = []
    _metric(lines, "patchbay_calls_total", "counter", "Tool calls in the ledger, by tool, server and status.")
    for row in Call.objects.values("tool_name", "server_name", "status").annotate(n=Count("id")).order_by():
        lines.append(
            f'patchbay_calls_total{{tool="{_escape(row["tool_name"])}",server="{_escape(row["server_name"])}",'
            f'outcome="{row["status"]}"}} {row["n"]}'
        )
    _metric(lines, "patchbay_approval_wait_seconds", "histogram", "Time from a call to a person's decision.")
    waits = Histogram(WAIT_BUCKETS)
    decided = Call.objects.filter(decided_at__isnull=False).values_list("status", "created_at", "decided_at")
    for status, created, decided_at in decided.iterator():
        waits.observe(
            (decided_at - created).total_seconds(), decision=status if status in ("denied", "expired") else "approved"
        )
    lines.extend(waits.render("patchbay_approval_wait_seconds"))
    _metric(lines, "patchbay_outbox_actions", "gauge", "Outbox actions by status.")
    counts = dict.fromkeys((s for s, _ in Action.STATUSES), 0)
    for row in Action.objects.values("status").annotate(n=Count("id")).order_by():
        counts[row["status"]] = row["n"]
    for status, n in counts.items():
        lines.append(f'patchbay_outbox_actions{{status="{status}"}} {n}')
    _metric(lines, "patchbay_outbox_attempts_total", "counter", "Delivery attempts made by the outbox.")
    lines.append(f"patchbay_outbox_attempts_total {Action.objects.aggregate(n=Sum('attempts'))['n'] or 0}")
    _metric(lines, "patchbay_dead_letters", "gauge", "Dead letters and unknown outcomes waiting for a person.")
    lines.append(f"patchbay_dead_letters {counts['dead'] + counts['unknown']}")
    _metric(lines, "patchbay_server_state", "gauge", "1 for each server's current state.")
    for name, state in Server.objects.values_list("name", "state"):
        lines.append(f'patchbay_server_state{{server="{_escape(name)}",state="{state}"}} 1')
    _metric(lines, "patchbay_tools", "gauge", "Tools in the catalog by status.")
    for row in Tool.objects.values("status").annotate(n=Count("id")).order_by():
        lines.append(f'patchbay_tools{{status="{row["status"]}"}} {row["n"]}')
    _metric(lines, "patchbay_worker_heartbeat_timestamp_seconds", "gauge", "When each worker last ran a task.")
    for hostname, seen in WorkerHeartbeat.objects.values_list("hostname", "seen_at"):
        lines.append(
            f'patchbay_worker_heartbeat_timestamp_seconds{{worker="{_escape(hostname)}"}} {seen.timestamp():.3f}'
        )
    _metric(lines, "patchbay_http_request_duration_seconds", "histogram", "Request latency of this web process.")
    lines.extend(REQUEST_LATENCY.render("patchbay_http_request_duration_seconds"))
    return "\n".join(lines) + "\n"
