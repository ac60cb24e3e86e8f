"""Prometheus metrics (`prometheus_client`): the database is counted at scrape time;
request latency is this process's own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from hostapp.calls.models import Call
from hostapp.catalog.models import Server, Tool, live_states
from hostapp.core import processes
from hostapp.core.models import Process, WorkerHeartbeat
from hostapp.outbox.models import Action

# Request latency buckets (seconds) for the web process's own histogram.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# From a call to a person's decision (seconds).
WAIT_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)

registry = CollectorRegistry()

REQUEST_LATENCY = Histogram(
    "patchbay_http_request_duration_seconds",
    "Request latency of this web process.",
    labelnames=("route", "method", "status"),
    buckets=BUCKETS,
    registry=registry,
)


class LatencyMiddleware:
    """Times every request by its URL pattern (not its path: no unbounded labels)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "(unmatched)"
        REQUEST_LATENCY.labels(
            route=route, method=request.method or "", status=f"{response.status_code // 100}xx"
        ).observe(time.perf_counter() - started)
        return response


def _approval_waits() -> HistogramMetricFamily:
    """Time from a call to a person's decision, by what was decided."""
    family = HistogramMetricFamily(
        "patchbay_approval_wait_seconds", "Time from a call to a person's decision.", labels=["decision"]
    )
    counts: dict[str, list[int]] = {}
    sums: dict[str, float] = {}
    decided = Call.objects.filter(decided_at__isnull=False).values_list("status", "created_at", "decided_at")
    for status, created, decided_at in decided.iterator():
        assert decided_at is not None  # filtered on above
        decision = status if status in (Call.DENIED, Call.EXPIRED) else "approved"
        seconds = (decided_at - created).total_seconds()
        row = counts.setdefault(decision, [0] * (len(WAIT_BUCKETS) + 1))
        for i, bound in enumerate(WAIT_BUCKETS):
            if seconds <= bound:
                row[i] += 1
        row[-1] += 1
        sums[decision] = sums.get(decision, 0.0) + seconds
    for decision, row in sorted(counts.items()):
        buckets = [(str(bound), row[i]) for i, bound in enumerate(WAIT_BUCKETS)] + [("+Inf", row[-1])]
        family.add_metric([decision], buckets, sums[decision])
    return family


class DatabaseCollector(Collector):
    """What the database holds, read at each scrape."""

    def collect(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "patchbay_calls",
            "Tool calls in the ledger, by tool, server and status.",
            labels=["tool", "server", "outcome"],
        )
        for row in Call.objects.values("tool_name", "server_name", "status").annotate(n=Count("id")).order_by():
            calls.add_metric([row["tool_name"], row["server_name"], row["status"]], row["n"])
        yield calls
        yield _approval_waits()
        actions = dict.fromkeys((s for s, _ in Action.STATUSES), 0)
        actions.update(Action.objects.values("status").annotate(n=Count("id")).order_by().values_list("status", "n"))
        outbox = GaugeMetricFamily("patchbay_outbox_actions", "Outbox actions by status.", labels=["status"])
        for status, n in actions.items():
            outbox.add_metric([status], n)
        yield outbox
        yield CounterMetricFamily(
            "patchbay_outbox_attempts",
            "Delivery attempts made by the outbox.",
            value=Action.objects.aggregate(n=Sum("attempts"))["n"] or 0,
        )
        yield GaugeMetricFamily(
            "patchbay_dead_letters",
            "Dead letters and unknown outcomes waiting for a person.",
            value=actions[Action.DEAD] + actions[Action.UNKNOWN],
        )
        servers = list(Server.objects.only("pk", "name", "enabled").prefetch_related(live_states()))
        summary = GaugeMetricFamily(
            "patchbay_server_state",
            "1 for each server's state: the worst a live process reports.",
            labels=["server", "state"],
        )
        each = GaugeMetricFamily(
            "patchbay_server_process_state",
            "1 for each server's state as each live process sees it.",
            labels=["server", "process", "role", "state"],
        )
        for server in servers:
            summary.add_metric([server.name, server.state], 1)
            for state in server.process_states:
                each.add_metric([server.name, state.process.name, state.process.role, state.state], 1)
        yield summary
        yield each
        alive = GaugeMetricFamily("patchbay_processes", "Processes seen alive lately, by role.", labels=["role"])
        live = Process.objects.filter(seen_at__gte=processes.alive_since())
        for role, n in live.values("role").annotate(n=Count("id")).order_by().values_list("role", "n"):
            alive.add_metric([role], n)
        yield alive
        tools = GaugeMetricFamily("patchbay_tools", "Tools in the catalog by status.", labels=["status"])
        for status, n in Tool.objects.values("status").annotate(n=Count("id")).order_by().values_list("status", "n"):
            tools.add_metric([status], n)
        yield tools
        beats = GaugeMetricFamily(
            "patchbay_worker_heartbeat_timestamp_seconds", "When each worker last ran a task.", labels=["worker"]
        )
        for hostname, seen in WorkerHeartbeat.objects.values_list("hostname", "seen_at"):
            beats.add_metric([hostname], seen.timestamp())
        yield beats


registry.register(DatabaseCollector())


def render() -> bytes:
    """Every metric in Prometheus's text format."""
    return generate_latest(registry)
