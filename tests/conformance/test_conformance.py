"""The official MCP conformance suite against the host's connection layer.

Runs npm ``@modelcontextprotocol/conformance`` (pinned in the root ``package.json``) with
the Node 22 binary from ``node_modules`` in client mode, where the suite starts a mock
server per scenario and runs ``tests/conformance/client.py <url>``, a client built on
``hostapp.mcp``:

* 0.1.16, ``--suite core`` (18 scenarios, legacy era), baseline ``baseline-0.1.16.yml``;
* 0.2.0-alpha.12, ``--suite all --spec-version 2026-07-28`` (33 scenarios, modern era),
  baseline ``baseline-2026-07-28.yml``.

The suite's exit code alone proves little: in suite mode a scenario that produced no
checks counts as passed, and the client's exit code is ignored. So each test also parses
the summary and holds every scenario outside the baseline to a pinned number of passed
checks, and the total to a pinned floor.

``sse-retry`` checks that the client reconnects 450-700 ms after ``retry: 500``; with
every scenario's client starting at once on a small machine that timing can slip
(notes.md, "Timing"). The suite run tolerates exactly that one warning, and
``test_sse_retry_alone`` holds the scenario to all its checks, run alone, with at most
one retry.

Skips when ``npm ci`` has not been run; fails instead when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import LEGACY, MODERN, NODE, REPO, need_installed

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "client.py"
LEGACY_BASELINE = HERE / "baseline-0.1.16.yml"
MODERN_BASELINE = HERE / "baseline-2026-07-28.yml"

# The suite starts every scenario's client at once (18 or 33 Python processes, ~0.8 s of
# CPU each just to import the SDK), so on a busy 2-core machine a client that takes 2 s
# alone can take 40 s. The suite kills a client after CLIENT_TIMEOUT_MS; a killed
# client's missing checks fail the run, so the limit is generous. Unloaded, the legacy
# suite takes ~11 s and the modern one ~19 s.
CLIENT_TIMEOUT_MS = 100_000
SUITE_TIMEOUT = 240  # s, the whole suite as a subprocess

# Checks passed per scenario outside the baseline (scenarios in the baseline as a whole
# are expected to fail; an entry `scenario:check` excuses one check, and the scenario's
# passing checks count). Both baselines are empty now.
# The auth/* scenarios run the host's OAuth client (interactive) through the whole flow;
# the ones whose authorization server misbehaves (resource-mismatch, iss-wrong-issuer...)
# pass when the client refuses to go on, so their clients exit 1 (the suite allows it).
LEGACY_SCENARIOS = 18
LEGACY_AUTH_PASSED = {
    "auth/metadata-default": 14,
    "auth/metadata-var1": 14,
    "auth/metadata-var2": 14,
    "auth/metadata-var3": 14,
    "auth/basic-cimd": 14,
    "auth/scope-from-www-authenticate": 15,
    "auth/scope-from-scopes-supported": 15,
    "auth/scope-omitted-when-undefined": 15,
    "auth/scope-step-up": 21,
    "auth/scope-retry-limit": 16,
    "auth/token-endpoint-auth-basic": 19,
    "auth/token-endpoint-auth-post": 19,
    "auth/token-endpoint-auth-none": 19,
    "auth/pre-registration": 14,
}
LEGACY_PASSED = {
    "initialize": 1,
    "tools_call": 1,
    "sse-retry": 3,
    "elicitation-sep1034-client-defaults": 5,
    **LEGACY_AUTH_PASSED,
}
LEGACY_TOTAL_FLOOR = sum(LEGACY_PASSED.values())  # 233, as the SDK's reference client
MODERN_SCENARIOS = 33
MODERN_AUTH_PASSED = {
    "auth/metadata-default": 18,
    "auth/metadata-var1": 18,
    "auth/metadata-var2": 18,
    "auth/metadata-var3": 18,
    "auth/basic-cimd": 12,
    "auth/scope-from-www-authenticate": 14,
    "auth/scope-from-scopes-supported": 14,
    "auth/scope-omitted-when-undefined": 14,
    "auth/scope-step-up": 23,
    "auth/scope-retry-limit": 11,
    "auth/token-endpoint-auth-basic": 19,
    "auth/token-endpoint-auth-post": 19,
    "auth/token-endpoint-auth-none": 19,
    "auth/pre-registration": 12,
    "auth/resource-mismatch": 2,
    "auth/offline-access-scope": 12,
    "auth/offline-access-not-supported": 14,
    "auth/authorization-server-migration": 27,
    "auth/iss-supported": 14,
    "auth/iss-not-advertised": 14,
    "auth/iss-supported-missing": 8,
    "auth/iss-wrong-issuer": 8,
    "auth/iss-unexpected": 8,
    "auth/iss-normalized": 8,
    "auth/metadata-issuer-mismatch": 3,
}
MODERN_PASSED = {
    "tools_call": 2,
    "request-metadata": 7,  # + 1 SKIPPED: the host declares no roots
    "http-standard-headers": 3,
    "http-custom-headers": 18,
    "http-invalid-tool-headers": 12,
    "json-schema-ref-no-deref": 1,
    "json-schema-2020-12-preservation": 9,
    "sep-2322-client-request-state": 5,
    **MODERN_AUTH_PASSED,
}
MODERN_TOTAL_FLOOR = sum(MODERN_PASSED.values())  # 404 (the SDK's reference client: 405)

SSE_RETRY_TIMING = "client-sse-retry-timing"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SCENARIO_LINE = re.compile(
    r"^[✓✗] (?P<name>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) failed(?:, (?P<warnings>\d+) warnings?)?$"
)
_TOTAL_LINE = re.compile(r"^Total: (?P<passed>\d+) passed, (?P<failed>\d+) failed, (?P<warnings>\d+) warnings?$")
_SECTIONS = {
    "Expected failures (in baseline):": "expected",
    "Stale baseline entries": "stale",
    "Unexpected failures (not in baseline):": "unexpected",
}


# -- running the suite ----------------------------------------------------------------------


def _need_node() -> None:
    need_installed("the conformance suite", NODE, LEGACY, MODERN)


def _client_command() -> str:
    # The suite splits the command on spaces and runs it through a shell with the URL
    # appended, so quoting survives the split.
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT.relative_to(REPO)))}"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_CONFORMANCE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    return env


@dataclass
class SuiteRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    out_dir: Path
    scenarios: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # passed, failed, warnings
    total: tuple[int, int, int] | None = None
    sections: dict[str, list[str]] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The suite's own summary block (per-scenario lines, totals, baseline verdict)."""
        text = _ANSI.sub("", self.stdout)
        start = text.find("=== SUITE SUMMARY ===")
        return text[start:].strip() if start >= 0 else text[-3000:]

    def describe(self) -> str:
        return (
            f"$ {shlex.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f}s\n{self.summary}\n"
            f"(stderr tail)\n{self.stderr[-1500:]}"
        )

    def checks(self, scenario: str) -> list[dict[str, object]]:
        """checks.json of one scenario from the output directory (`auth/x` is a subdirectory)."""
        found = sorted(self.out_dir.glob(f"{scenario}-*/checks.json"))
        return json.loads(found[-1].read_text()) if found else []


def _parse(run: SuiteRun) -> SuiteRun:
    section = None
    for raw in run.stdout.splitlines():
        line = _ANSI.sub("", raw).strip()
        if m := _SCENARIO_LINE.match(line):
            run.scenarios[m["name"]] = (int(m["passed"]), int(m["failed"]), int(m["warnings"] or 0))
            continue
        if m := _TOTAL_LINE.match(line):
            run.total = (int(m["passed"]), int(m["failed"]), int(m["warnings"]))
            continue
        for heading, key in _SECTIONS.items():
            if line.startswith(heading):
                section = key
                run.sections.setdefault(key, [])
                break
        else:
            if section is not None and (m := re.match(r"^[~✓✗] (\S+)$", line)):
                run.sections[section].append(m[1])
            elif section is not None and line and not line.startswith(("~", "✓", "✗")):
                section = None
    return run


def _run_suite(entry: Path, args: list[str], out_dir: Path) -> SuiteRun:
    argv = [str(NODE), str(entry), "client", "--command", _client_command(), *args]
    argv += ["--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(out_dir)]
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=SUITE_TIMEOUT, check=False
    )
    run = SuiteRun(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, out_dir)
    return _parse(run)


def _show(capsys: pytest.CaptureFixture[str], title: str, run: SuiteRun) -> None:
    with capsys.disabled():
        print(f"\n--- {title}: exit {run.returncode}, {run.seconds:.1f}s ---\n{run.summary}\n", flush=True)


def baseline_entries(path: Path) -> list[tuple[str, str]]:
    """(entry, reason) for each `- entry  # reason` line under `client:`."""
    entries = []
    for line in path.read_text().splitlines():
        m = re.match(r"^\s+-\s+(?P<entry>[^\s#]+)\s*(?:#\s*(?P<reason>.*))?$", line)
        if m:
            entries.append((m["entry"], (m["reason"] or "").strip()))
    return entries


def _whole_scenarios(path: Path) -> set[str]:
    return {entry for entry, _ in baseline_entries(path) if ":" not in entry}


def _assert_suite(run: SuiteRun, *, scenarios: int, passed: dict[str, int], floor: int, baseline: Path) -> None:
    why = run.describe()
    assert run.total is not None, f"no `Total:` line in the suite's output\n{why}"
    assert len(run.scenarios) == scenarios, f"expected {scenarios} scenarios, got {len(run.scenarios)}\n{why}"
    # Everything the baseline does not excuse as a whole is held to its pinned checks.
    outside = set(run.scenarios) - _whole_scenarios(baseline)
    assert outside == set(passed), f"scenarios outside the baseline changed: {sorted(outside ^ set(passed))}\n{why}"
    for name, want in passed.items():
        got = run.scenarios[name][0]
        assert got >= want, f"{name}: {got} checks passed, expected at least {want}\n{why}"
    summed = sum(p for p, _, _ in run.scenarios.values())
    assert summed == run.total[0], f"per-scenario lines ({summed}) do not add up to the total\n{why}"
    assert run.total[0] >= floor, f"{run.total[0]} checks passed, the floor is {floor}\n{why}"


# -- tests ----------------------------------------------------------------------------------


def test_baselines_give_a_reason_for_every_entry() -> None:
    """Cheap, no Node needed: the baselines parse the way the tests read them, each with a reason."""
    for path in (LEGACY_BASELINE, MODERN_BASELINE):
        assert any(line.startswith("client:") for line in path.read_text().splitlines()), f"{path.name}: no `client:`"
        entries = baseline_entries(path)
        missing = [entry for entry, reason in entries if not reason]
        assert not missing, f"{path.name}: entries without a reason: {missing}"
        names = [entry for entry, _ in entries]
        assert len(names) == len(set(names)), f"{path.name} lists an entry twice"
    # 0.1.16 does not understand `scenario:check-id` entries (notes.md).
    assert all(":" not in entry for entry, _ in baseline_entries(LEGACY_BASELINE))


@pytest.mark.slow
def test_legacy_core_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0.1.16 `client --suite core` with the legacy baseline."""
    _need_node()
    run = _run_suite(
        LEGACY, ["--suite", "core", "--expected-failures", str(LEGACY_BASELINE.relative_to(REPO))], tmp_path
    )
    _show(capsys, "conformance 0.1.16 --suite core", run)
    passed = dict(LEGACY_PASSED)
    if run.returncode != 0 and _only_sse_retry_timing(run):
        # The one timing-sensitive check slipped under load: test_sse_retry_alone holds it.
        with capsys.disabled():
            print("note: sse-retry reconnect timing warned under suite load; see test_sse_retry_alone\n")
        passed["sse-retry"] = LEGACY_PASSED["sse-retry"] - 1
        floor = LEGACY_TOTAL_FLOOR - 1
    else:
        assert run.returncode == 0, f"the suite failed\n{run.describe()}"
        floor = LEGACY_TOTAL_FLOOR
    _assert_suite(run, scenarios=LEGACY_SCENARIOS, passed=passed, floor=floor, baseline=LEGACY_BASELINE)


def _only_sse_retry_timing(run: SuiteRun) -> bool:
    """The run failed only because sse-retry's reconnect came late (a WARNING, nothing else)."""
    if run.sections.get("unexpected") != ["sse-retry"] or run.sections.get("stale"):
        return False
    bad = [c for c in run.checks("sse-retry") if c.get("status") in ("FAILURE", "WARNING")]
    return len(bad) == 1 and bad[0].get("id") == SSE_RETRY_TIMING and bad[0].get("status") == "WARNING"


@pytest.mark.slow
def test_sse_retry_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sse-retry by itself, all three checks; one retry if the reconnect timing slips."""
    _need_node()
    attempts = []
    for attempt in range(2):
        out = tmp_path / f"attempt-{attempt}"
        argv = [str(NODE), str(LEGACY), "client", "--command", _client_command(), "--scenario", "sse-retry"]
        argv += ["--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(out)]
        proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120, check=False)
        result = _ANSI.sub("", proc.stdout + proc.stderr)
        m = re.search(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings?", result)
        attempts.append((proc.returncode, m.group(0) if m else "(no result line)"))
        if proc.returncode == 0 and m and m.group(1) == m.group(2) == "3":
            break
        found = sorted(out.glob("sse-retry-*/checks.json"))
        checks = json.loads(found[-1].read_text()) if found else []
        bad = [(c.get("id"), c.get("status")) for c in checks if c.get("status") in ("FAILURE", "WARNING")]
        timing_only = bad == [(SSE_RETRY_TIMING, "WARNING")]
        assert timing_only and attempt == 0, (
            f"sse-retry failed (attempts: {attempts}, bad checks: {bad})\n{result[-4000:]}"
        )
    with capsys.disabled():
        print(f"\n--- conformance 0.1.16 --scenario sse-retry: {attempts} ---\n", flush=True)


@pytest.mark.slow
def test_modern_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0.2.0-alpha.12 `client --suite all --spec-version 2026-07-28` with the modern baseline."""
    _need_node()
    args = [
        "--suite",
        "all",
        "--spec-version",
        "2026-07-28",
        "--expected-failures",
        str(MODERN_BASELINE.relative_to(REPO)),
    ]
    run = _run_suite(MODERN, args, tmp_path)
    _show(capsys, "conformance 0.2.0-alpha.12 --suite all --spec-version 2026-07-28", run)
    if run.returncode != 0 and run.sections.get("unexpected") and not run.sections.get("stale"):
        # On a loaded machine a scenario's client can run out of time (seen once: tools_call's
        # tool never called). The whole suite runs once more and must then pass entirely.
        with capsys.disabled():
            print(f"note: unexpected failures {run.sections['unexpected']} on the first run; running again\n")
        run = _run_suite(MODERN, args, tmp_path / "again")
        _show(capsys, "conformance 0.2.0-alpha.12, second run", run)
    assert run.returncode == 0, f"the suite failed\n{run.describe()}"
    _assert_suite(
        run, scenarios=MODERN_SCENARIOS, passed=MODERN_PASSED, floor=MODERN_TOTAL_FLOOR, baseline=MODERN_BASELINE
    )
