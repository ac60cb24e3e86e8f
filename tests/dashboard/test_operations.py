"""Operations: readiness, metrics, JSON logs, ledger pruning, the home dashboard."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from hostapp.calls.models import Call
from hostapp.calls.tasks import prune
from hostapp.catalog import states
from hostapp.catalog.models import Server
from hostapp.core import identity
from hostapp.core.logs import JsonFormatter
from hostapp.core.models import Process, WorkerHeartbeat
from hostapp.mcp import ServerStatus
from hostapp.outbox.models import Action


def _call(status: str, days_old: int = 0, **kw: object) -> Call:
    call = Call.objects.create(
        requester_kind=Call.CLI, requester_name="cli", server_name="s", tool_name="s__t", original_name="t",
        tool_class="write", definition_hash="h", arguments={}, argument_digest="d", decision=Call.OUTBOX,
        status=status, **kw,
    )  # fmt: skip
    Call.objects.filter(pk=call.pk).update(created_at=timezone.now() - timedelta(days=days_old))
    return call


@pytest.mark.django_db
def test_readyz_needs_a_recent_worker_heartbeat(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "ok"
    assert response.json()["checks"]["redis"] == "ok"
    WorkerHeartbeat.objects.create(hostname="worker@test", seen_at=timezone.now())
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok", "worker": "ok"}}


@pytest.mark.django_db
def test_metrics_need_a_staff_session_or_the_token(client: Client, admin_client: Client, settings: object) -> None:
    assert client.get("/metrics").status_code == 401
    settings.PATCHBAY_METRICS_TOKEN = "scrape-me-please"  # type: ignore[attr-defined]
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    _call(Call.SUCCEEDED)
    action_call = _call(Call.FAILED)
    Action.objects.create(
        call=action_call, status=Action.DEAD, max_attempts=3, attempts=3, next_attempt_at=timezone.now()
    )
    Call.objects.filter(pk=action_call.pk).update(decided_at=timezone.now(), status=Call.DENIED)
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-please")
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = _samples(response.content.decode())
    assert samples[("patchbay_calls_total", (("outcome", "succeeded"), ("server", "s"), ("tool", "s__t")))] == 1
    assert samples[("patchbay_outbox_actions", (("status", "dead"),))] == 1
    assert samples[("patchbay_dead_letters", ())] == 1
    assert samples[("patchbay_outbox_attempts_total", ())] == 3
    assert samples[("patchbay_approval_wait_seconds_count", (("decision", "denied"),))] == 1
    assert samples[("patchbay_approval_wait_seconds_bucket", (("decision", "denied"), ("le", "+Inf")))] == 1
    assert admin_client.get("/metrics").status_code == 200
    # Each server's state summed up, each process's own, and the processes alive by role.
    server = Server.objects.create(name="files", command="true")
    identity.set_role(identity.WORKER)
    try:
        states.record_statuses([ServerStatus(name="files", state="failing", transport="stdio", enabled=True)])
    finally:
        identity.set_role(identity.COMMAND)
    samples = _samples(admin_client.get("/metrics").content.decode())
    assert samples[("patchbay_server_state", (("server", "files"), ("state", "failing")))] == 1
    worker = next(labels for name, labels in samples if name == "patchbay_server_process_state")
    assert dict(worker)["role"] == "worker" and dict(worker)["state"] == "failing" and server.name == "files"
    assert samples[("patchbay_processes", (("role", "worker"),))] == 1
    # This process's own latency histogram counts the scrapes it served.
    samples = _samples(admin_client.get("/metrics").content.decode())
    served = [v for (name, labels), v in samples.items() if name == "patchbay_http_request_duration_seconds_count"]
    assert sum(served) >= 2


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus exposition, parsed as Prometheus parses it."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_json_logs_are_one_object_a_line_with_call_ids() -> None:
    record = logging.LogRecord("hostapp.outbox", logging.WARNING, __file__, 1, "delivery of %s failed", ("x",), None)
    record.call_id = 42
    record.idempotency_key = "abc"
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["message"] == "delivery of x failed"
    assert entry["call_id"] == 42 and entry["idempotency_key"] == "abc"
    assert entry["level"] == "warning"


@pytest.mark.django_db
def test_pruning_keeps_recent_calls_and_dead_letters(settings: object) -> None:
    settings.PATCHBAY_RETENTION_DAYS = 30  # type: ignore[attr-defined]
    old_done = _call(Call.SUCCEEDED, days_old=40)
    Action.objects.create(call=old_done, status=Action.DONE, max_attempts=3, next_attempt_at=timezone.now())
    old_dead = _call(Call.FAILED, days_old=40)
    Action.objects.create(call=old_dead, status=Action.DEAD, max_attempts=3, next_attempt_at=timezone.now())
    old_waiting = _call(Call.WAITING, days_old=40)
    recent = _call(Call.SUCCEEDED, days_old=1)
    assert prune() == 1
    left = set(Call.objects.values_list("pk", flat=True))
    assert left == {old_dead.pk, old_waiting.pk, recent.pk}
    assert not Action.objects.filter(call_id=old_done.pk).exists()


@pytest.mark.django_db
def test_the_home_page_shows_the_host_at_a_glance(admin_client: Client) -> None:
    _call(Call.WAITING)
    done = _call(Call.SUCCEEDED)
    Call.objects.filter(pk=done.pk).update(finished_at=timezone.now())
    body = admin_client.get("/").content.decode()
    assert 'id="home-pending">1<' in body
    assert "Calls and deliveries per minute" in body
    assert "succeeded (1)" in body
    fragment = admin_client.get("/?fragment=1").content.decode()
    assert "<polyline" in fragment and "<html" not in fragment


@pytest.mark.django_db
def test_the_home_page_counts_the_processes_alive_by_role(admin_client: Client) -> None:
    Process.objects.all().delete()  # this test run's own, if an earlier test left it
    now = timezone.now()
    for name, role, seen in (("web@a:1", "web", now), ("web@b:1", "web", now), ("worker@a:2", "worker", now)):
        Process.objects.create(name=name, role=role, hostname="a", pid=1, started_at=now, seen_at=seen)
    Process.objects.create(
        name="worker@gone:3", role="worker", hostname="gone", pid=3, started_at=now, seen_at=now - timedelta(hours=1)
    )
    body = admin_client.get("/").content.decode()
    assert "Processes holding server connections: 2 web · 1 worker<" in body
