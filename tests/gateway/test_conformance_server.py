"""The official MCP conformance suite in server mode against the agents' endpoint.

Runs npm ``@modelcontextprotocol/conformance`` (pinned in the root ``package.json``) with
the Node 22 binary from ``node_modules`` against a real host's /mcp (conftest.py):

* 0.1.16 ``server --suite all --spec-version 2025-11-25`` (32 scenarios, the 2025 era);
* 0.2.0-alpha.12 ``server --suite all --spec-version 2026-07-28`` (40 scenarios; ``all``
  includes the draft-tagged ones: server-stateless, caching, http-header-validation and
  the input-required-result-* scenarios);
* 0.2.0-alpha.12 ``server --scenario server-session-lifecycle --spec-version 2025-11-25``
  (DELETE ends a 2025-era session, then 404), which 0.1.16 does not have.

All three read one baseline, ``conformance-server-baseline.yml``, a reason on each line.

The endpoint wants a bearer token and the suite cannot send one: neither version has a
header option in server mode (``server --help``) nor reads an environment variable for
it (the bundles read only GITHUB_TOKEN, for ``tier-check``). So the suite talks to
``proxy.py``, a loopback proxy that adds ``Authorization: Bearer <token>`` and forwards
everything else as is, Host and Origin included, streaming SSE.

Exit code 0 proves little (notes.md: a scenario with no checks counts as passed), so each
run's summary is parsed: the number of scenarios, the checks passed by every scenario the
baseline does not excuse as a whole (pinned), and the total.

Skips when ``npm ci`` has not been run; fails instead when ``CI`` is set.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.gateway.conftest import GatewayHost
from tests.gateway.proxy import AuthProxy
from tests.helpers import LEGACY, MODERN, NODE, REPO, need_installed

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "conformance-server-baseline.yml"
SUITE_TIMEOUT = 300  # s, one suite as a subprocess (idle: 3 s legacy, 12 s modern)

# Checks passed per scenario outside the baseline's whole-scenario entries. The false
# passes tools-call-simple-text / tools-call-error are pinned too (see the baseline).
LEGACY_SCENARIOS = 32
LEGACY_PASSED = {
    "server-initialize": 1,
    "logging-set-level": 1,
    "ping": 1,
    "tools-list": 1,
    "tools-call-simple-text": 1,
    "tools-call-error": 1,
    "server-sse-multiple-streams": 2,
    "resources-list": 1,
    "prompts-list": 1,
    "dns-rebinding-protection": 2,
}
LEGACY_TOTAL = 12
MODERN_SCENARIOS = 40
MODERN_PASSED = {
    "server-stateless": 26,  # + 3 baselined per check
    "tools-list": 4,
    "tools-call-simple-text": 2,
    "tools-call-error": 2,
    "server-sse-multiple-streams": 1,
    "resources-list": 2,
    "sep-2164-resource-not-found": 4,
    "prompts-list": 2,
    "dns-rebinding-protection": 2,
    "caching": 7,
    "http-header-validation": 14,
    "input-required-result-missing-input-response": 1,  # + 1 warning baselined per check
    "input-required-result-unsupported-methods": 2,
    "input-required-result-ignore-extra-params": 2,
    "input-required-result-validate-input": 2,  # + 1 warning baselined per check
}
# Each scenario excused as a whole still passes its wire-schema check (1 each): 98 in all.
MODERN_TOTAL = 98
LIFECYCLE_CHECKS = 3

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SCENARIO_LINE = re.compile(
    r"^[✓✗] (?P<name>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed(?:, (?P<warnings>\d+) warnings?)?$"
)
_TOTAL_LINE = re.compile(r"^Total: (?P<passed>\d+) passed, (?P<failed>\d+) failed(?:, (?P<warnings>\d+) warnings?)?$")
_SINGLE_LINE = re.compile(r"Passed: (?P<passed>\d+)/(?P<of>\d+), (?P<failed>\d+) failed, (?P<warnings>\d+) warnings?")
_SECTIONS = {
    "Expected failures (in baseline):": "expected",
    "Stale baseline entries": "stale",
    "Unexpected failures (not in baseline):": "unexpected",
}
# Passes by chance when an unrelated catalog/server event lands in its 1.5 s listen window
# (see its line in the baseline): a stale entry for it alone is tolerated.
BY_CHANCE = "server-stateless:sep-2575-server-sends-tools-list-changed-on-subscription"


def _need_node() -> None:
    need_installed("the conformance suite", NODE, LEGACY, MODERN)


@dataclass
class ServerRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    scenarios: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # passed, failed, warnings
    total: tuple[int, int] | None = None
    single: tuple[int, int, int, int] | None = None  # passed, of, failed, warnings (--scenario)
    sections: dict[str, list[str]] = field(default_factory=dict)  # the baseline verdict
    retried_after: list[str] = field(default_factory=list)  # timing failures of a first run

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.stdout + "\n" + self.stderr)

    @property
    def summary(self) -> str:
        text = _ANSI.sub("", self.stdout)
        start = text.find("=== SUMMARY ===")
        return text[start:].strip() if start >= 0 else self.text[-3000:]

    def describe(self) -> str:
        return f"$ {shlex.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f}s\n{self.summary}"


def baseline_entries(path: Path = BASELINE) -> list[tuple[str, str]]:
    """(entry, reason) for each `- entry  # reason` line."""
    entries = []
    for line in path.read_text().splitlines():
        m = re.match(r"^\s+-\s+(?P<entry>[^\s#]+)\s*(?:#\s*(?P<reason>.*))?$", line)
        if m:
            entries.append((m["entry"], (m["reason"] or "").strip()))
    return entries


def _whole_scenarios() -> set[str]:
    return {entry for entry, _ in baseline_entries() if ":" not in entry}


def _run(entry: Path, url: str, args: list[str]) -> ServerRun:
    argv = [str(NODE), str(entry), "server", "--url", url, *args]
    argv += ["--expected-failures", str(BASELINE.relative_to(REPO))]
    env = {**os.environ, "NO_COLOR": "1"}
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT, check=False)
    run = ServerRun(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
    section = None
    for raw in run.text.splitlines():
        line = raw.strip()
        if m := _SCENARIO_LINE.match(line):
            run.scenarios[m["name"]] = (int(m["passed"]), int(m["failed"]), int(m["warnings"] or 0))
        elif m := _TOTAL_LINE.match(line):
            run.total = (int(m["passed"]), int(m["failed"]))
        elif m := _SINGLE_LINE.search(line):
            run.single = (int(m["passed"]), int(m["of"]), int(m["failed"]), int(m["warnings"]))
        elif heading := next((k for h, k in _SECTIONS.items() if line.startswith(h)), None):
            section = heading
            run.sections.setdefault(section, [])
        elif section is not None and (m := re.match(r"^[~✓✗] (\S+)$", line)):
            run.sections[section].append(m[1])
        elif line:
            section = None
    return run


def _show(capsys: pytest.CaptureFixture[str], title: str, run: ServerRun) -> None:
    retried = f" (run again alone after timing failures: {run.retried_after})" if run.retried_after else ""
    with capsys.disabled():
        print(f"\n--- {title}: exit {run.returncode}, {run.seconds:.1f}s{retried} ---\n{run.summary}\n", flush=True)


def _assert_suite(run: ServerRun, *, scenarios: int, passed: dict[str, int], total: int) -> None:
    why = run.describe()
    if run.returncode != 0 and run.sections.get("stale") == [BY_CHANCE] and not run.sections.get("unexpected"):
        # The one check that can pass by chance did: its scenario and the total gain a check.
        scenario = BY_CHANCE.split(":", 1)[0]
        passed = {**passed, scenario: passed[scenario] + 1}
        total += 1
    else:
        assert run.returncode == 0, f"the suite failed (unexpected failures or stale baseline entries)\n{why}"
        assert "Baseline check passed" in run.text, why
    assert run.total is not None, f"no `Total:` line in the suite's output\n{why}"
    assert len(run.scenarios) == scenarios, f"expected {scenarios} scenarios, got {len(run.scenarios)}\n{why}"
    outside = set(run.scenarios) - _whole_scenarios()
    assert outside == set(passed), f"scenarios outside the baseline changed: {sorted(outside ^ set(passed))}\n{why}"
    for name, want in passed.items():
        assert run.scenarios[name][0] == want, f"{name}: {run.scenarios[name][0]} checks passed, expected {want}\n{why}"
    summed = sum(p for p, _, _ in run.scenarios.values())
    assert summed == run.total[0], f"per-scenario lines ({summed}) do not add up to the total\n{why}"
    assert run.total[0] == total, f"{run.total[0]} checks passed, expected {total}\n{why}"


@pytest.fixture(scope="module")
def proxy_url(main_host: GatewayHost) -> Iterator[str]:
    _need_node()
    proxy = AuthProxy(main_host.url, main_host.tokens["agent-auto"])
    base = proxy.start()
    try:
        yield f"{base}/mcp"
    finally:
        proxy.stop()


def test_the_baseline_gives_a_reason_for_every_entry() -> None:
    """Cheap, no Node needed: the baseline parses the way the tests read it, each entry with a reason."""
    text = BASELINE.read_text()
    assert "server:" in text.splitlines()
    entries = baseline_entries()
    assert entries
    assert not [e for e, reason in entries if len(reason) < 20], "every entry needs a reason on its line"
    names = [e for e, _ in entries]
    assert len(names) == len(set(names)), "an entry is listed twice"
    # The modern suite rejects a per-check entry next to its whole scenario.
    whole = _whole_scenarios()
    assert not [e for e in names if ":" in e and e.split(":", 1)[0] in whole]
    # Nothing that applies to any server is excused as a whole.
    assert not whole & (set(LEGACY_PASSED) | set(MODERN_PASSED) | {"server-session-lifecycle"})


def test_the_proxy_adds_the_token_and_nothing_else(main_host: GatewayHost, proxy_url: str) -> None:
    """Through the proxy an initialize succeeds; a foreign Origin is still refused by the endpoint."""
    import httpx

    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    ok = httpx.post(proxy_url, json=body, headers=headers, timeout=30)
    assert ok.status_code == 200 and ok.headers.get("mcp-session-id"), ok.text
    foreign = httpx.post(proxy_url, json=body, headers={**headers, "Origin": "http://evil.example"}, timeout=30)
    assert foreign.status_code == 403
    # Directly, without the proxy, the same request has no token.
    assert httpx.post(main_host.mcp_url, json=body, headers=headers, timeout=30).status_code == 401


RUNS = {
    "0.1.16 server --suite all --spec-version 2025-11-25": (LEGACY, ["--suite", "all", "--spec-version", "2025-11-25"]),
    "0.2.0-alpha.12 server --suite all --spec-version 2026-07-28": (
        MODERN,
        ["--suite", "all", "--spec-version", "2026-07-28"],
    ),
    "0.2.0-alpha.12 server --scenario server-session-lifecycle --spec-version 2025-11-25": (
        MODERN,
        ["--scenario", "server-session-lifecycle", "--spec-version", "2025-11-25"],
    ),
}


def _only_listen_window_timing(run: ServerRun) -> bool:
    """Failed only in server-stateless checks that read a stream for 500-1500 ms.

    Those windows are short: on a busy machine the frames come late and the check fails
    with "Failed to receive ... frames". Nothing else may be wrong for a retry.
    """
    unexpected = run.sections.get("unexpected") or []
    stale = set(run.sections.get("stale") or []) - {BY_CHANCE}
    return bool(unexpected) and not stale and all(e.startswith("server-stateless:sep-2575-") for e in unexpected)


@pytest.fixture(scope="module")
def runs(proxy_url: str) -> dict[str, ServerRun]:
    """The three runs side by side (independent sessions; mostly waiting on the network).

    A run that failed only in server-stateless's short stream-reading windows (timing, on
    a busy machine) runs once more, alone, and that run counts.
    """
    with ThreadPoolExecutor(max_workers=len(RUNS)) as pool:
        futures = {title: pool.submit(_run, entry, proxy_url, args) for title, (entry, args) in RUNS.items()}
        done = {title: future.result() for title, future in futures.items()}
    for title, run in done.items():
        if run.returncode != 0 and _only_listen_window_timing(run):
            entry, args = RUNS[title]
            retry = _run(entry, proxy_url, args)
            retry.retried_after = run.sections.get("unexpected") or []
            done[title] = retry
    return done


def test_server_suite_2025_11_25(runs: dict[str, ServerRun], capsys: pytest.CaptureFixture[str]) -> None:
    title = "0.1.16 server --suite all --spec-version 2025-11-25"
    _show(capsys, f"conformance {title}", runs[title])
    _assert_suite(runs[title], scenarios=LEGACY_SCENARIOS, passed=LEGACY_PASSED, total=LEGACY_TOTAL)


def test_server_suite_2026_07_28(runs: dict[str, ServerRun], capsys: pytest.CaptureFixture[str]) -> None:
    title = "0.2.0-alpha.12 server --suite all --spec-version 2026-07-28"
    _show(capsys, f"conformance {title}", runs[title])
    _assert_suite(runs[title], scenarios=MODERN_SCENARIOS, passed=MODERN_PASSED, total=MODERN_TOTAL)


def test_server_session_lifecycle_2025_11_25(runs: dict[str, ServerRun], capsys: pytest.CaptureFixture[str]) -> None:
    title = "0.2.0-alpha.12 server --scenario server-session-lifecycle --spec-version 2025-11-25"
    run = runs[title]
    _show(capsys, f"conformance {title}", run)
    assert run.returncode == 0, run.describe() + "\n" + run.text[-3000:]
    assert run.single == (LIFECYCLE_CHECKS, LIFECYCLE_CHECKS, 0, 0), run.text[-3000:]
