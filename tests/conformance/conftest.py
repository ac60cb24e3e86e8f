"""The reference fixture (tests/fixtures/conformance_server.py) for the folder: reached
directly, and behind a real host with a one-server unprefixed view in front of it. One of
each for the folder (package scope), as test_server_suite.py runs the suites against both
and test_rounds_through_host.py drives the host with the SDK's own client.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.gateway.conftest import GatewayHost
from tests.helpers import LEGACY, MODERN, NODE, PYTHON, REPO, clean_env, need_installed, stop_process

FIXTURE = "tests.fixtures.conformance_server"
FIXTURE_START_TIMEOUT = 30  # s (~1 s idle: importing the SDK)

# The operator's decision for this server (an admin's class override of each tool): every
# call runs at once in the web process, as a read-only call does, so what the server sends
# during a call (progress, logs, requests for input) can reach the agent. Without it the
# fixture's tools, which carry no annotations, would be destructive: each call would wait
# for a person's approval, and a write would be delivered by a worker.
READ_ONLY = (
    "from hostapp.catalog import actions; from hostapp.catalog.models import Tool; "
    "[actions.set_class_override(t, 'read_only') for t in Tool.objects.filter(server__name='conformance')]"
)


def need_node() -> None:
    need_installed("the conformance suite", NODE, LEGACY, MODERN)


@contextlib.contextmanager
def conformance_server(timeout: float = FIXTURE_START_TIMEOUT) -> Iterator[str]:
    """Run the reference fixture (`python -m tests.fixtures.conformance_server`, any free
    port) until the block ends; its MCP endpoint's URL, once it answers."""
    proc = subprocess.Popen(
        [PYTHON, "-m", FIXTURE, "--port", "0"], cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        yield _ready_url(proc, timeout)
    finally:
        stop_process(proc, timeout=5)
        proc.stdout.close()


def _ready_url(proc: subprocess.Popen[str], timeout: float) -> str:
    """The URL of the fixture's `ready <url>` line, waited for with a deadline."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the conformance fixture exited ({proc.wait()}) before it was ready")
            if line.startswith("ready "):
                return line.split(maxsplit=1)[1].strip()
    raise AssertionError(f"the conformance fixture was not ready after {timeout}s")


@pytest.fixture(scope="package")
def direct_url() -> Iterator[str]:
    need_node()
    with conformance_server() as url:
        yield url


@pytest.fixture(scope="package")
def conformance_host(direct_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHost]:
    """A real host (`manage.py run`) with the fixture as its one server, trusted, and the
    agent `suite` (its token in `tokens`) on a one-server unprefixed view of it."""
    # A 2026-07-28 agent's input is asked of a person (nobody here): the host answers "cancel"
    # soon, rather than holding the fixture's call for the default ten minutes.
    host = GatewayHost(
        "conformance", tmp_path_factory.mktemp("conformance-host"), ("--no-beat",), PATCHBAY_INPUT_WAIT="5"
    )
    try:
        host.wait_ready()
        config = tmp_path_factory.mktemp("conformance-config") / "servers.json"
        config.write_text(json.dumps({"mcpServers": {"conformance": {"url": direct_url, "trusted": True}}}))
        host.mcp("import", str(config), "--refresh")
        host.manage("shell", "-c", READ_ONLY)
        created = host.mcp("token", "create", "suite", "--servers", "conformance", "--no-prefix", "--json")
        host.tokens["suite"] = json.loads(created.stdout)["token"]
        yield host
    finally:
        host.terminate()
        host.wait_stopped()
