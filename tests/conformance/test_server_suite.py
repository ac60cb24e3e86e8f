"""The official MCP conformance suite in server mode against our reference fixture, directly.

Runs npm ``@modelcontextprotocol/conformance`` (pinned in the root ``package.json``) with the
Node 22 binary from ``node_modules`` against ``tests/fixtures/conformance_server.py`` (a
real SDK server that serves every tool, resource and prompt the server scenarios call, in
both eras), started as a subprocess on a free port:

* 0.1.16 ``server --suite all`` (32 scenarios, the 2025 era), baseline
  ``baseline-server-direct-2025.yml``;
* 0.2.0-alpha.12 ``server --suite all --spec-version 2026-07-28`` (40 scenarios: the
  stateless era, draft-tagged ones included: server-stateless, caching, the header
  validations, the input-required-result-* scenarios), baseline
  ``baseline-server-direct-2026.yml``;
* 0.2.0-alpha.12 ``server --suite all --spec-version 2025-11-25`` (33 scenarios), without a
  baseline (all must pass): 0.1.16's server-sse-polling cannot exercise stream resumption
  (its baseline says why) and 0.1.16 has no server-session-lifecycle; this run covers both.

Exit code 0 proves little (a scenario with no checks counts as passed), so each run's
summary is parsed and the checks passed per scenario are pinned, with the number of
scenarios and the total.

The same suites run through the host's /mcp with this fixture configured as its one
server (``conformance_host`` in conftest.py, which also starts the fixture), and the two
are compared: ``run_server_suites(url, baselines)`` runs the suites in parallel,
``scenario_table(run)`` says which scenarios passed and ``lost_scenarios(direct, other)``
which passed directly but not the other way.

Skips when ``npm ci`` has not been run; fails instead when ``CI`` is set.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.gateway.conftest import GatewayHost
from tests.gateway.proxy import AuthProxy
from tests.gateway.test_conformance_server import (
    _ANSI,
    _SCENARIO_LINE,
    _SECTIONS,
    _TOTAL_LINE,
    LEGACY,
    MODERN,
    NODE,
    baseline_entries,
)
from tests.helpers import REPO

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SUITE_TIMEOUT = 300  # s, one suite as a subprocess (idle: 3-5 s each, the three side by side)

LEGACY_2025 = "0.1.16 server --suite all"
MODERN_2026 = "0.2.0-alpha.12 server --suite all --spec-version 2026-07-28"
MODERN_2025 = "0.2.0-alpha.12 server --suite all --spec-version 2025-11-25"
SUITES: dict[str, tuple[Path, list[str]]] = {
    LEGACY_2025: (LEGACY, ["--suite", "all"]),
    MODERN_2026: (MODERN, ["--suite", "all", "--spec-version", "2026-07-28"]),
    MODERN_2025: (MODERN, ["--suite", "all", "--spec-version", "2025-11-25"]),
}
# The runs against the fixture reached directly, each with its baseline (None: every
# scenario must pass, no --expected-failures).
DIRECT_BASELINES: dict[str, Path | None] = {
    LEGACY_2025: HERE / "baseline-server-direct-2025.yml",
    MODERN_2026: HERE / "baseline-server-direct-2026.yml",
    MODERN_2025: None,
}

# Checks passed per scenario, directly. 0.1.16 counts no warnings in its summary:
# server-sse-polling's 2 WARNINGs show as 0 passed, 0 failed (baselined).
DIRECT_PASSED: dict[str, dict[str, int]] = {
    LEGACY_2025: {
        "server-initialize": 1, "logging-set-level": 1, "ping": 1, "completion-complete": 1, "tools-list": 1,
        "tools-call-simple-text": 1, "tools-call-image": 1, "tools-call-audio": 1, "tools-call-embedded-resource": 1,
        "tools-call-mixed-content": 1, "tools-call-with-logging": 1, "tools-call-error": 1,
        "tools-call-with-progress": 1, "tools-call-sampling": 1, "tools-call-elicitation": 1,
        "json-schema-2020-12": 4, "elicitation-sep1034-defaults": 5, "server-sse-polling": 0,
        "server-sse-multiple-streams": 2, "elicitation-sep1330-enums": 5, "resources-list": 1,
        "resources-read-text": 1, "resources-read-binary": 1, "resources-templates-read": 1, "resources-subscribe": 1,
        "resources-unsubscribe": 1, "prompts-list": 1, "prompts-get-simple": 1, "prompts-get-with-args": 1,
        "prompts-get-embedded-resource": 1, "prompts-get-with-image": 1, "dns-rebinding-protection": 2,
    },
    MODERN_2026: {
        "server-stateless": 30, "completion-complete": 2, "tools-list": 4, "tools-call-simple-text": 2,
        "tools-call-image": 2, "tools-call-audio": 2, "tools-call-embedded-resource": 2, "tools-call-mixed-content": 2,
        "tools-call-error": 2, "tools-call-with-progress": 2, "json-schema-2020-12": 8,
        "server-sse-multiple-streams": 1, "resources-list": 2, "resources-read-text": 2, "resources-read-binary": 2,
        "resources-templates-read": 2, "sep-2164-resource-not-found": 4, "prompts-list": 2, "prompts-get-simple": 2,
        "prompts-get-with-args": 2, "prompts-get-embedded-resource": 2, "prompts-get-with-image": 2,
        "dns-rebinding-protection": 2, "caching": 8, "http-header-validation": 14,
        "http-custom-header-server-validation": 10, "input-required-result-basic-elicitation": 3,
        "input-required-result-basic-sampling": 3, "input-required-result-basic-list-roots": 3,
        "input-required-result-request-state": 3, "input-required-result-multiple-input-requests": 3,
        "input-required-result-multi-round": 4, "input-required-result-missing-input-response": 2,
        "input-required-result-non-tool-request": 3, "input-required-result-result-type": 2,
        "input-required-result-unsupported-methods": 2, "input-required-result-tampered-state": 2,
        "input-required-result-capability-check": 2, "input-required-result-ignore-extra-params": 2,
        "input-required-result-validate-input": 3,
    },
    MODERN_2025: {
        "server-initialize": 3, "server-session-lifecycle": 3, "logging-set-level": 2, "ping": 2,
        "completion-complete": 2, "tools-list": 3, "tools-call-simple-text": 2, "tools-call-image": 2,
        "tools-call-audio": 2, "tools-call-embedded-resource": 2, "tools-call-mixed-content": 2,
        "tools-call-with-logging": 2, "tools-call-error": 2, "tools-call-with-progress": 2, "tools-call-sampling": 2,
        "tools-call-elicitation": 2, "json-schema-2020-12": 8, "elicitation-sep1034-defaults": 6,
        "server-sse-polling": 3, "server-sse-multiple-streams": 2, "elicitation-sep1330-enums": 6,
        "resources-list": 2, "resources-read-text": 2, "resources-read-binary": 2, "resources-templates-read": 2,
        "resources-subscribe": 2, "resources-unsubscribe": 2, "prompts-list": 2, "prompts-get-simple": 2,
        "prompts-get-with-args": 2, "prompts-get-embedded-resource": 2, "prompts-get-with-image": 2,
        "dns-rebinding-protection": 2,
    },
}  # fmt: skip


@dataclass
class ServerRun:
    """One `conformance server` run and its parsed summary."""

    title: str
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    baseline: Path | None
    scenarios: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # passed, failed, warnings
    total: tuple[int, int] | None = None  # passed, failed
    sections: dict[str, list[str]] = field(default_factory=dict)  # the baseline verdict: expected, stale, unexpected

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

    def parse(self) -> None:
        section = None
        for raw in self.text.splitlines():
            line = raw.strip()
            if m := _SCENARIO_LINE.match(line):
                self.scenarios[m["name"]] = (int(m["passed"]), int(m["failed"]), int(m["warnings"] or 0))
            elif m := _TOTAL_LINE.match(line):
                self.total = (int(m["passed"]), int(m["failed"]))
            elif heading := next((key for start, key in _SECTIONS.items() if line.startswith(start)), None):
                section = heading
                self.sections.setdefault(section, [])
            elif section is not None and (m := re.match(r"^[~✓✗] (\S+)$", line)):
                self.sections[section].append(m[1])
            elif line:
                section = None


def run_server_suite(title: str, url: str, baseline: Path | None) -> ServerRun:
    """One suite of `SUITES` against `url`, with `baseline` as its --expected-failures."""
    entry, args = SUITES[title]
    argv = [str(NODE), str(entry), "server", "--url", url, *args]
    if baseline is not None:
        argv += ["--expected-failures", str(baseline)]
    env = {**os.environ, "NO_COLOR": "1"}
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT, check=False)
    run = ServerRun(title, argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, baseline)
    run.parse()
    return run


def run_server_suites(url: str, baselines: Mapping[str, Path | None]) -> dict[str, ServerRun]:
    """The suites named in `baselines` (titles of `SUITES`) against `url`, side by side
    (independent sessions and stateless requests; mostly waiting on the network)."""
    with ThreadPoolExecutor(max_workers=len(baselines)) as pool:
        futures = {title: pool.submit(run_server_suite, title, url, path) for title, path in baselines.items()}
        return {title: future.result() for title, future in futures.items()}


def scenario_table(run: ServerRun) -> dict[str, bool]:
    """Each scenario of the run: passed (no failed check, no warning, not reported failing
    against the baseline) or not."""
    failing = set(run.sections.get("expected", [])) | set(run.sections.get("unexpected", []))
    return {
        name: failed == 0 and warnings == 0 and name not in failing
        for name, (_, failed, warnings) in run.scenarios.items()
    }


def lost_scenarios(direct: ServerRun, other: ServerRun) -> list[str]:
    """Scenarios that pass in `direct` but not in `other` (the same suite another way, e.g.
    through the host), missing ones included; the caller excuses its baselined ones."""
    theirs = scenario_table(other)
    return sorted(name for name, ok in scenario_table(direct).items() if ok and not theirs.get(name, False))


def _show(capsys: pytest.CaptureFixture[str], run: ServerRun) -> None:
    with capsys.disabled():
        print(
            f"\n--- conformance {run.title}: exit {run.returncode}, {run.seconds:.1f}s ---\n{run.summary}\n", flush=True
        )


def assert_suite_passed(run: ServerRun, passed: Mapping[str, int]) -> None:
    """The run passed against its baseline, with exactly `passed` checks passed per scenario;
    every scenario the baseline does not name passed."""
    why = run.describe()
    assert run.returncode == 0, f"the suite failed (unexpected failures or stale baseline entries)\n{why}"
    if run.baseline is not None:
        assert "Baseline check passed" in run.text, why
    assert run.total is not None, f"no `Total:` line in the suite's output\n{why}"
    assert len(run.scenarios) == len(passed), f"expected {len(passed)} scenarios, got {len(run.scenarios)}\n{why}"
    got = {name: counts[0] for name, counts in run.scenarios.items()}
    assert got == dict(passed), f"checks passed per scenario changed\n{why}"
    assert run.total[0] == sum(passed.values()), f"{run.total[0]} checks passed, expected {sum(passed.values())}\n{why}"
    baselined = {entry.split(":", 1)[0] for entry, _ in baseline_entries(run.baseline)} if run.baseline else set()
    failed = sorted(name for name, ok in scenario_table(run).items() if not ok and name not in baselined)
    assert not failed, f"scenarios failed outside the baseline: {failed}\n{why}"


@pytest.fixture(scope="module")
def direct_runs(direct_url: str) -> dict[str, ServerRun]:
    return run_server_suites(direct_url, DIRECT_BASELINES)


def test_the_baselines_give_a_reason_for_every_entry() -> None:
    """Cheap, no Node needed: each baseline parses the way the runs read it, a reason on every entry."""
    for path in (p for p in DIRECT_BASELINES.values() if p is not None):
        assert any(line.startswith("server:") for line in path.read_text().splitlines()), path
        entries = baseline_entries(path)
        assert not [e for e, reason in entries if len(reason) < 20], f"{path.name}: every entry needs a reason"
        names = [e for e, _ in entries]
        assert len(names) == len(set(names)), f"{path.name}: an entry is listed twice"
        # Every entry names a scenario of the run that reads it.
        title = next(t for t, p in DIRECT_BASELINES.items() if p == path)
        assert {e.split(":", 1)[0] for e in names} <= set(DIRECT_PASSED[title]), path.name


@pytest.mark.parametrize("title", list(DIRECT_BASELINES))
def test_the_fixture_passes_the_server_suite(
    title: str, direct_runs: dict[str, ServerRun], capsys: pytest.CaptureFixture[str]
) -> None:
    run = direct_runs[title]
    _show(capsys, run)
    assert_suite_passed(run, DIRECT_PASSED[title])


# -- through the host -------------------------------------------------------------------------

HOST_BASELINES: dict[str, Path] = {
    LEGACY_2025: HERE / "baseline-server-host-2025.yml",
    MODERN_2026: HERE / "baseline-server-host-2026.yml",
    MODERN_2025: HERE / "baseline-server-host-modern-2025.yml",
}


@pytest.fixture(scope="module")
def host_url(conformance_host: GatewayHost) -> Iterator[str]:
    """The host's /mcp for the suite's agent (`conformance_host`), through the token-adding proxy."""
    proxy = AuthProxy(conformance_host.url, conformance_host.tokens["suite"])
    base = proxy.start()
    try:
        yield f"{base}/mcp"
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def host_runs(host_url: str) -> dict[str, ServerRun]:
    """One after the other, not side by side: the host passes a server's log message on
    only while its call is the only one in flight on that connection (hostapp/mcp/
    connection.py, CallWatch), and three suites at once would overlap their calls."""
    return {title: run_server_suite(title, host_url, path) for title, path in HOST_BASELINES.items()}


@pytest.mark.parametrize("title", list(HOST_BASELINES))
def test_through_the_host_every_scenario_passing_directly_passes(
    title: str, direct_runs: dict[str, ServerRun], host_runs: dict[str, ServerRun], capsys: pytest.CaptureFixture[str]
) -> None:
    """The transparent-proxy check: the same suite through /mcp loses no scenario the
    fixture passes directly, except those the host changes on purpose (its baseline, a
    reason on each line)."""
    direct, through = direct_runs[title], host_runs[title]
    _show(capsys, through)
    excused = {entry.split(":", 1)[0] for entry, _ in baseline_entries(HOST_BASELINES[title])}
    lost = [name for name in lost_scenarios(direct, through) if name not in excused]
    passing = [name for name, ok in scenario_table(direct).items() if ok]
    kept = [name for name in passing if scenario_table(through).get(name)]
    with capsys.disabled():
        print(f"{title}: {len(passing)} scenarios pass directly, {len(kept)} of them through the host", flush=True)
    assert not lost, f"passing directly, failing through the host: {lost}\n{through.describe()}"
    assert through.returncode == 0, f"stale or unexpected baseline entries\n{through.describe()}"
