from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostapp.mcp import Pool, PoolPolicy, ServerConfig
from tests.helpers import REPO

HOSTILE = str(REPO / "tests" / "fixtures" / "hostile_server.py")

# Fast, deterministic supervision for tests: restarts at once, circuit after 3 failures.
TEST_POLICY = PoolPolicy(backoff_base=0.05, backoff_cap=0.2, crash_window=30, crash_threshold=3, cooldown=1.0)


def hostile(name: str, mode: str, state: Path | None = None, **kw: object) -> ServerConfig:
    args = [HOSTILE, mode]
    if state is not None:
        args += ["--state", str(state)]
    kw.setdefault("connect_timeout", 10.0)
    kw.setdefault("call_timeout", 10.0)
    return ServerConfig(name, "stdio", command=sys.executable, args=tuple(args), **kw)  # type: ignore[arg-type]


def bundled(name: str, data_dir: Path, **kw: object) -> ServerConfig:
    return ServerConfig(
        name,
        "stdio",
        command=sys.executable,
        args=("-m", f"servers.{name}", "--data-dir", str(data_dir)),
        cwd=str(REPO),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def pool() -> Iterator[Pool]:
    p = Pool(TEST_POLICY)
    yield p
    p.close()
