"""One beat at a time (hostapp/core/beat.py): two real `celery beat` processes on one Redis,
only the one holding the lock sends the schedule; when it dies, the other takes over."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from hostapp.core.beat import LOCK_KEY
from tests.helpers import PYTHON, REPO, clean_env, stop_process, wait_until

pytestmark = pytest.mark.slow

TTL = 3


def _other_db(url: str) -> str:
    """The test run's Redis, another database of it: what the beats send goes nowhere else."""
    if url.startswith("unix://"):
        return url.split("?")[0] + "?db=14"
    base, _, _ = url.rpartition("/")
    return f"{base}/14"


class Beat:
    def __init__(self, name: str, tmp: Path, redis_url: str) -> None:
        self.name = name
        self.lines: list[str] = []
        env = clean_env(
            PATCHBAY_DATA_DIR=str(tmp / name),
            REDIS_URL=redis_url,
            DATABASE_URL=None,
            PATCHBAY_BEAT_LOCK_TTL=str(TTL),
            # Every task it sends is said (at INFO the routine ones are not).
            PATCHBAY_LOG_LEVEL="DEBUG",
        )
        (tmp / name).mkdir()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "hostapp", "beat", "-l", "INFO", "--schedule", str(tmp / name / "schedule")],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def sent(self) -> int:
        return sum("Sending due task" in line for line in self.lines)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)


@pytest.fixture
def beats(tmp_path: Path) -> Iterator[tuple[list[Beat], redis.Redis]]:
    url = _other_db(settings.REDIS_URL)
    client = redis.Redis.from_url(url)
    client.delete(LOCK_KEY)
    started: list[Beat] = []
    try:
        yield started, client
    finally:
        for beat in started:
            stop_process(beat.proc)
        client.flushdb()


def test_a_second_beat_sends_nothing_until_the_first_is_gone(tmp_path: Path, beats: tuple) -> None:
    started, client = beats
    url = _other_db(settings.REDIS_URL)
    first = Beat("first", tmp_path, url)
    started.append(first)
    wait_until(lambda: first.sent() >= 1, timeout=60, what="the first beat sending the schedule")
    holder = client.get(LOCK_KEY)
    assert holder is not None

    second = Beat("second", tmp_path, url)
    started.append(second)
    wait_until(lambda: second.said("another beat holds the lock"), timeout=60, what="the second beat waiting")
    sent_before = first.sent()
    wait_until(lambda: first.sent() >= sent_before + 2, timeout=30, what="the first beat sending on")
    assert second.sent() == 0, "".join(second.lines)
    assert client.get(LOCK_KEY) == holder

    first.proc.send_signal(signal.SIGKILL)  # it gives nothing back: its lock runs out
    first.proc.wait(timeout=10)
    wait_until(lambda: second.said("took the lock"), timeout=TTL * 5, what="the second beat taking over")
    wait_until(lambda: second.sent() >= 1, timeout=30, what="the second beat sending")

    second.proc.send_signal(signal.SIGTERM)  # a beat that stops gives the lock back
    second.proc.wait(timeout=30)
    assert client.get(LOCK_KEY) is None
