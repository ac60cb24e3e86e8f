"""The garbage collector's threshold in the host's processes (hostapp/core/gc_tuning.py)."""

from __future__ import annotations

import gc
import io
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from hostapp.catalog import cli
from hostapp.core.gc_tuning import tune_gc, tuned_gc
from tests.helpers import PYTHON, REPO, clean_env, stop_process, wait_until

PYTHONS_OWN = (700, 10, 10)


@pytest.fixture(autouse=True)
def pythons_own_thresholds() -> Iterator[None]:
    """Each test starts from Python's own thresholds and leaves the process as it found it."""
    before = gc.get_threshold()
    gc.set_threshold(*PYTHONS_OWN)
    yield
    gc.set_threshold(*before)


def test_the_setting_sets_the_first_threshold_and_keeps_the_older_factors(settings: Any) -> None:
    settings.PATCHBAY_GC_THRESHOLD = 12345
    gc.set_threshold(700, 7, 3)

    assert tune_gc() == (12345, 7, 3)
    assert gc.get_threshold() == (12345, 7, 3)


def test_zero_keeps_pythons_own(settings: Any) -> None:
    settings.PATCHBAY_GC_THRESHOLD = 0

    assert tune_gc() == PYTHONS_OWN
    assert gc.get_threshold() == PYTHONS_OWN


def test_a_block_runs_with_it_and_the_thresholds_before_it_come_back(settings: Any) -> None:
    settings.PATCHBAY_GC_THRESHOLD = 5000
    gc.set_threshold(900, 9, 9)
    with tuned_gc() as inside:
        assert inside == gc.get_threshold() == (5000, 9, 9)
    assert gc.get_threshold() == (900, 9, 9)

    with pytest.raises(RuntimeError), tuned_gc():
        raise RuntimeError("a refresh that failed")
    assert gc.get_threshold() == (900, 9, 9)


@pytest.mark.django_db
def test_mcp_refresh_refreshes_with_it_and_gives_it_back(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hostapp.catalog.models import Server

    settings.PATCHBAY_GC_THRESHOLD = 4321
    Server.objects.create(name="nowhere", transport=Server.HTTP, url="http://127.0.0.1:9/mcp")
    seen = []
    refresh_each = cli._refresh_each

    def spy(servers: list[Any], jobs: int) -> Iterator[Any]:
        seen.append(gc.get_threshold())
        yield from refresh_each(servers, jobs)
        seen.append(gc.get_threshold())

    monkeypatch.setattr(cli, "_refresh_each", spy)
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:  # nothing listens there: the command fails, as it says
        call_command("mcp", "refresh", "nowhere", stdout=io.StringIO(), stderr=err)

    assert caught.value.code == 1, err.getvalue()

    assert seen == [(4321, 10, 10), (4321, 10, 10)]
    assert gc.get_threshold() == PYTHONS_OWN


@pytest.mark.parametrize(
    ("value", "expected"), [(None, (20_000, 10, 10)), ("12345", (12345, 10, 10)), ("0", PYTHONS_OWN)]
)
def test_the_web_process_sets_it_when_it_loads_the_app(value: str | None, expected: tuple[int, int, int]) -> None:
    """Unset, the default (20,000); 0, Python's own."""
    code = "import gc, hostapp.asgi; print(tuple(gc.get_threshold()))"
    result = subprocess.run(
        [PYTHON, "-c", code],
        cwd=REPO,
        env=clean_env(PATCHBAY_GC_THRESHOLD=value),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(expected)


def test_the_worker_sets_it_before_its_pool_starts(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    # A queue of its own: the worker consumes nothing another test queued.
    command = [PYTHON, "-m", "celery", "-A", "hostapp", "worker", "--pool", "threads", "--concurrency", "2"]
    command += ["-Q", "patchbay-gc-test", "-l", "INFO", "-n", "gc@%h", "--without-mingle", "--without-gossip"]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            command,
            cwd=REPO,
            env=clean_env(PATCHBAY_GC_THRESHOLD="12345", PATCHBAY_LOG_LEVEL="INFO"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def started() -> str | None:
        text = log.read_text(errors="replace")
        return text if " ready." in text or worker.poll() is not None else None

    try:
        text = wait_until(started, timeout=90, what="the worker to be ready")
    finally:
        stop_process(worker, timeout=30)
    assert " ready." in text, text[-3000:]
    tuned = text.index("garbage collector thresholds (12345, 10, 10)")
    assert tuned < text.index(" ready."), text[-3000:]
