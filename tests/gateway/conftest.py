"""Real hosts for the agents' endpoint tests: `manage.py run` as a user starts it.

Each host is `python manage.py run --port N` in its own process group, with its own
PATCHBAY_DATA_DIR and no DATABASE_URL / REDIS_URL: SQLite, its own embedded Redis, the
web process (daphne, which serves /mcp), a worker and, where a test needs the outbox
sweep, beat. On its first run it imports the bundled servers (mailbox, tasks, calendar;
trusted) and the worker lists their tools. Tokens, approvals, denials, imports and the
ledger go through the `manage.py mcp` CLI against the host's data directory, as an
operator would.

Four hosts, because the settings under test are process-wide and pull apart (for offers,
the catalog does); each starts with the first test of this folder that needs it (10-20 s
to be ready on an idle machine, a minute or two on one shared with other heavy jobs):

* main (PATCHBAY_AGENT_APPROVAL_WAIT=4, no beat): a destructive call gives up waiting
  after 4 s and answers with its call id; the rest of test_endpoint.py and the
  conformance suite run here too.
* approvals (PATCHBAY_AGENT_APPROVAL_WAIT=600, the default 15-minute approval TTL, no
  beat): the agents wait while a person at the CLI approves or denies. A CLI run costs
  2 s on an idle machine but took 50-60 s on one shared with other heavy jobs, so the
  person must not race a short TTL.
* expiry (PATCHBAY_APPROVAL_TTL=10, the settings' minimum; PATCHBAY_AGENT_APPROVAL_WAIT=120;
  with beat, whose outbox sweep expires waiting calls every 5 s): nobody decides, the
  calls expire while the agents wait.
* offers (no beat): server-everything behind the endpoint, over stdio and Streamable HTTP
  (test_offers.py imports them): its prompts, resources and progress through /mcp.

PATCHBAY_AGENT_WRITE_WAIT is 120 s where writes are delivered (default 30 s), so a worker
slowed down by a busy machine does not turn a write's answer into "still running".

The approvals and expiry scenarios (approvals.py) are mostly waiting: they run in
background threads from the first test of this folder and their tests join them.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from tests.gateway import approvals
from tests.helpers import PYTHON, REPO, free_port, wait_until
from tests.host import RunningHost
from tests.mcp.test_interop import EVERYTHING, LOOPBACK_PRELOAD, NODE, _need_node, _serve

BUNDLED_TOOLS = {
    "calendar__cancel",
    "calendar__create",
    "calendar__list",
    "mailbox__archive",
    "mailbox__delete",
    "mailbox__read",
    "mailbox__search",
    "mailbox__send",
    "tasks__add",
    "tasks__complete",
    "tasks__delete",
    "tasks__list",
}
STATUS_TOOL = "patchbay__call_status"
CLI_TIMEOUT = 200  # s for one `manage.py mcp` run (2 s idle; 60 s seen under heavy load)
READY_TIMEOUT = 200  # s for a host to answer and list the bundled tools (pytest-timeout is 300 s a test)

# Token names are the agents' names in the ledger. `agent-auto` also serves the
# conformance suite (through its proxy).
AGENT_TOKENS = {"agent-auto": "", "agent-legacy": ""}
MAIN_TOKENS = {**AGENT_TOKENS, "mail-only": "mailbox", "revoked-bot": ""}


class GatewayHost(RunningHost):
    """`manage.py run` (tests/host.py) with the endpoint tests' settings, tokens and CLI."""

    def __init__(self, name: str, data_dir: Path, args: tuple[str, ...] = (), **env: str) -> None:
        super().__init__(data_dir, *args, env={"PATCHBAY_LOG_LEVEL": "WARNING", **env})
        self.name = name
        self.tokens: dict[str, str] = {}
        self._ready = False
        self.revoking: subprocess.Popen[str] | None = None
        self.token_lock = threading.Lock()

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def _active_tools(self) -> set[str]:
        db = self.data_dir / "patchbay.sqlite3"
        if not db.exists():
            return set()
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            try:
                rows = conn.execute(
                    "SELECT t.exposed_name FROM catalog_tool t JOIN catalog_server s ON s.id = t.server_id "
                    "WHERE t.status = 'active' AND s.enabled"
                ).fetchall()
            except sqlite3.OperationalError:  # not migrated yet
                return set()
        return {r[0] for r in rows}

    def wait_ready(self) -> None:
        """The web process answers and the worker has listed the bundled servers' tools.

        The catalog is read from the host's SQLite file (read-only) before anything asks
        /mcp, so the endpoint's first tools/list already sees the whole catalog.
        """
        if self._ready:
            return

        def ready() -> bool:
            assert self.proc.poll() is None, f"{self.name}: run exited early:\n{self.output}"
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        wait_until(ready, timeout=READY_TIMEOUT, interval=0.2, what=f"{self.name} to answer\n{self.output[-3000:]}")
        wait_until(
            lambda: self._active_tools() >= BUNDLED_TOOLS,
            timeout=READY_TIMEOUT,
            interval=0.2,
            what=f"{self.name}'s catalog to list the bundled tools\n{self.output[-3000:]}",
        )
        self._ready = True

    # -- the operator's CLI --------------------------------------------------------------

    def mcp_async(self, *args: str) -> subprocess.Popen[str]:
        return self.start_manage("mcp", *args)

    def mcp(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [PYTHON, "manage.py", "mcp", *args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"mcp {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def create_tokens(self, specs: dict[str, str]) -> None:
        """`mcp token create NAME [--servers A,B] --json` for each, run side by side."""
        procs = {}
        for name, servers in specs.items():
            args = ["token", "create", name, "--json"] + (["--servers", servers] if servers else [])
            procs[name] = (args, self.mcp_async(*args))
        for name, (args, proc) in procs.items():
            out, err = proc.communicate(timeout=CLI_TIMEOUT)
            assert proc.returncode == 0, f"mcp {' '.join(args)} exited {proc.returncode}\n{out}\n{err}"
            created = json.loads(out)
            assert created["name"] == name and created["token"].startswith("pb_"), out
            self.tokens[name] = created["token"]

    def calls(self, *args: str) -> list[dict[str, Any]]:
        return json.loads(self.mcp("calls", "--json", *args).stdout)

    # -- stopping --------------------------------------------------------------------------

    def wait_stopped(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.kill_group()  # whatever is left of the group (a stuck child) goes too
        self._reader.join(timeout=5)


@dataclass
class _Hosts:
    tmp: Path
    started: dict[str, GatewayHost] = field(default_factory=dict)
    background: list[threading.Thread] = field(default_factory=list)
    decisions: approvals.Decisions = field(default_factory=approvals.Decisions)

    SPECS: ClassVar[dict[str, tuple[tuple[str, ...], dict[str, str]]]] = {
        "main": (("--no-beat",), {"PATCHBAY_AGENT_APPROVAL_WAIT": "4", "PATCHBAY_AGENT_WRITE_WAIT": "120"}),
        "approvals": (("--no-beat",), {"PATCHBAY_AGENT_APPROVAL_WAIT": "600", "PATCHBAY_AGENT_WRITE_WAIT": "120"}),
        "expiry": ((), {"PATCHBAY_APPROVAL_TTL": "10", "PATCHBAY_AGENT_APPROVAL_WAIT": "120"}),
        # server-everything behind the endpoint (test_offers.py): prompts, resources, progress.
        "offers": (("--no-beat",), {}),
    }

    def start(self, *names: str) -> None:
        for name in names:
            if name not in self.started:
                args, env = self.SPECS[name]
                self.started[name] = GatewayHost(name, self.tmp / name, args, **env)

    def get(self, name: str) -> GatewayHost:
        self.start(name)
        host = self.started[name]
        host.wait_ready()
        return host

    def ready_with_agents(self, name: str) -> GatewayHost:
        """A host with the `agent-auto` / `agent-legacy` tokens (callable from a thread)."""
        host = self.get(name)
        with host.token_lock:
            if not host.tokens:
                host.create_tokens(AGENT_TOKENS)
        return host


@pytest.fixture(scope="package", autouse=True)
def gateway_hosts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Hosts]:
    """Starts, with the first test of this folder, every host the selected tests need.

    They stop after the last test of this folder (package scope), not at the end of a
    whole-suite run. The approvals and expiry scenarios (approvals.py, mostly waiting)
    start in background threads too, so their waiting overlaps the other tests.
    """
    hosts = _Hosts(tmp_path_factory.mktemp("gateway-hosts"))
    here = Path(__file__).parent
    mine = [item for item in request.session.items if Path(str(item.fspath)).parent == here]
    uses = {name for item in mine for name in getattr(item, "fixturenames", ())}
    if "main_host" in uses:
        hosts.start("main")
    if "offers_host" in uses:
        hosts.start("offers")
    if "decisions" in uses:
        hosts.start("approvals", "expiry")
        for name, scenario in (("approvals", approvals.run_approvals), ("expiry", approvals.run_expiry)):
            thread = threading.Thread(
                target=scenario,
                args=(lambda name=name: hosts.ready_with_agents(name), hosts.decisions),
                name=f"{name}-scenario",
                daemon=True,
            )
            hosts.background.append(thread)
            thread.start()
    try:
        yield hosts
    finally:
        for host in hosts.started.values():
            host.terminate()
        for host in hosts.started.values():
            host.wait_stopped()
        for thread in hosts.background:
            thread.join(timeout=30)


def raw_initialize(host: GatewayHost, headers: dict[str, str]) -> httpx.Response:
    """One `initialize` POST to /mcp with these headers (no SDK: status codes are the point)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    return httpx.post(host.mcp_url, headers={**base, **headers}, json=body, timeout=30)


@pytest.fixture(scope="package")
def main_host(gateway_hosts: _Hosts) -> GatewayHost:
    host = gateway_hosts.get("main")
    if not host.tokens:
        host.create_tokens(MAIN_TOKENS)
        # `revoked-bot` works, then an operator revokes it; the revoke runs in the
        # background (a CLI run costs seconds) and test_endpoint joins it.
        worked = raw_initialize(host, {"Authorization": f"Bearer {host.tokens['revoked-bot']}"})
        assert worked.status_code == 200, worked.text
        host.revoking = host.mcp_async("token", "revoke", "revoked-bot")
    return host


@pytest.fixture
def decisions(gateway_hosts: _Hosts) -> approvals.Decisions:
    """What the background approvals and expiry scenarios recorded, once both are over."""
    recorded = gateway_hosts.decisions
    assert gateway_hosts.background, "the approvals and expiry scenarios were not started"
    for thread in gateway_hosts.background:
        thread.join(timeout=250)  # within pytest-timeout's 300 s per test
        assert not thread.is_alive(), f"the {thread.name} did not finish in time"
    assert not recorded.errors, f"a scenario failed: {recorded.errors!r}"
    return recorded


# -- server-everything behind the "offers" host (test_offers.py, test_inputs.py) --------------------

OFFERS_TOKENS = {"all": [], "own": ["--servers", "web", "--no-prefix"], "simple": ["--servers", "everything"]}


def _rows(host: GatewayHost, sql: str) -> list[tuple[Any, ...]]:
    db = host.data_dir / "patchbay.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # not migrated yet
            return []


@pytest.fixture(scope="package")
def everything_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """server-everything over Streamable HTTP, for the host and for a direct client."""
    _need_node()
    port = free_port()
    log = tmp_path_factory.mktemp("everything") / "everything.log"
    argv = [str(NODE), "--import", LOOPBACK_PRELOAD, str(EVERYTHING), "streamableHttp"]
    with _serve(argv, env={"PATH": "/usr/bin:/bin", "PORT": str(port)}, port=port, path="/mcp", log=log) as served:
        yield served.url


@pytest.fixture(scope="package")
def offers_host(gateway_hosts: _Hosts, everything_url: str, tmp_path_factory: pytest.TempPathFactory) -> GatewayHost:
    """The "offers" host with server-everything twice (test_offers.py, test_inputs.py): one
    for the whole folder, as the host is."""
    host = gateway_hosts.get("offers")
    config = tmp_path_factory.mktemp("offers") / "servers.json"
    servers = {
        "everything": {"command": str(NODE), "args": [str(EVERYTHING)], "trusted": True},
        "web": {"type": "http", "url": everything_url, "trusted": True},
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    host.mcp("import", str(config), "--refresh")
    wait_until(lambda: len(_rows(host, "SELECT exposed_name FROM catalog_prompt WHERE status = 'active'")) == 8)
    # An admin's class override: these tools must run in the web process, the one that
    # holds the subscriptions and the agent's session (a write would be a worker's).
    host.manage(
        "shell",
        "-c",
        "from hostapp.catalog import actions; from hostapp.catalog.models import Tool; "
        "[actions.set_class_override(Tool.objects.get(exposed_name=f'{s}__{t}'), 'read_only')"
        " for s in ('everything', 'web') for t in ('toggle-subscriber-updates', 'trigger-sampling-request')]",
    )
    for name, args in OFFERS_TOKENS.items():
        extra = ["--tools", "everything__simple-*"] if name == "simple" else []
        created = json.loads(host.mcp("token", "create", name, *args, *extra, "--json").stdout)
        host.tokens[name] = created["token"]
    return host
