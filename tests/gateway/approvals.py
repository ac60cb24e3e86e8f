"""Destructive calls that wait for a person, on the approvals and expiry hosts (conftest.py).

Approvals: both agents (`agent-auto` with `mode="auto"`, `agent-legacy` with
`mode="legacy"`) make two destructive calls at once, each awaiting `call_tool` with a
progress callback. Meanwhile a person thread polls `manage.py mcp calls --json --status
waiting` until the calls show up, then runs `mcp approve ID` and `mcp deny ID --reason ...`
side by side. Afterwards each agent reads the message it had deleted.

Expiry: both agents make one destructive call each and nobody decides; with
PATCHBAY_APPROVAL_TTL=10 the outbox sweep (every 5 s) expires the calls while the agents
still wait (PATCHBAY_AGENT_APPROVAL_WAIT=120).

Both scenarios are mostly waiting, so conftest.py runs them in background threads from the
start of this folder's tests; the tests in test_endpoint.py that use the `decisions` fixture join
them and check what they recorded. Each ends with the host's ledger (`mcp calls --json`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types

from tests.gateway.agents import MODES, agent

if TYPE_CHECKING:
    from tests.gateway.conftest import GatewayHost

DENIAL_REASON = "Not this task: it is still needed for the audit"
PERSON_DEADLINE = 400.0  # s for every call to show up as waiting and be decided
CLI_TIMEOUT = 200

# What each agent asks for: the person approves the first and denies the second (approvals
# host); the third waits until it expires (expiry host).
ASKS = {
    "auto": {
        "approve": ("mailbox__delete", {"message_id": "msg-0001"}),
        "deny": ("tasks__delete", {"task_id": "task-0001"}),
        "expire": ("calendar__cancel", {"event_id": "evt-0001"}),
    },
    "legacy": {
        "approve": ("mailbox__delete", {"message_id": "msg-0002"}),
        "deny": ("tasks__delete", {"task_id": "task-0002"}),
        "expire": ("calendar__cancel", {"event_id": "evt-0002"}),
    },
}


@dataclass
class Outcome:
    tool: str
    result: types.CallToolResult | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)


@dataclass
class Decisions:
    outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)  # mode -> kind -> outcome
    decided: dict[tuple[str, str], int] = field(default_factory=dict)  # (agent, tool) -> call id
    person_log: list[str] = field(default_factory=list)
    person_error: BaseException | None = None
    reads_after: dict[str, types.CallToolResult] = field(default_factory=dict)
    ledgers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # host -> `mcp calls --json`
    errors: dict[str, BaseException] = field(default_factory=dict)  # scenario -> what broke it
    seconds: dict[str, float] = field(default_factory=dict)


def person(host: GatewayHost, decisions: Decisions, stop: threading.Event) -> None:
    """A person at the CLI: polls the waiting calls, then approves and denies them side by side."""
    todo: dict[tuple[str, str], list[str]] = {}
    for mode, asks in ASKS.items():
        todo[(f"agent-{mode}", asks["approve"][0])] = ["approve"]
        todo[(f"agent-{mode}", asks["deny"][0])] = ["deny", "--reason", DENIAL_REASON]
    started = time.monotonic()
    try:
        while todo and not stop.is_set():
            assert time.monotonic() - started < PERSON_DEADLINE, f"never showed up as waiting: {sorted(todo)}"
            running = []
            waiting = host.calls("--status", "waiting")
            decisions.person_log.append(f"{time.monotonic() - started:.1f}s: {len(waiting)} waiting")
            for row in waiting:
                key = (row["requester"], row["tool"])
                if key in todo:
                    action = todo.pop(key)
                    decisions.decided[key] = row["call_id"]
                    running.append((key, host.mcp_async(action[0], str(row["call_id"]), *action[1:])))
            for key, proc in running:
                out, err = proc.communicate(timeout=CLI_TIMEOUT)
                decisions.person_log.append(
                    f"{time.monotonic() - started:.1f}s: {key}: exit {proc.returncode}: {out.strip()} {err.strip()}"
                )
                assert proc.returncode == 0, decisions.person_log[-1]
            if todo:
                time.sleep(0.3)
    except BaseException as exc:  # reported by the tests
        decisions.person_error = exc


async def one_agent(host: GatewayHost, decisions: Decisions, mode: str, kinds: tuple[str, ...]) -> None:
    """One agent makes its calls at once, each with a progress callback."""
    outcomes = decisions.outcomes.setdefault(mode, {})
    async with agent(host, f"agent-{mode}", mode) as client:

        async def ask(kind: str) -> None:
            tool, arguments = ASKS[mode][kind]
            outcome = outcomes[kind] = Outcome(tool)

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                outcome.progress.append((value, total, message))

            started = time.monotonic()
            try:
                outcome.result = await client.call_tool(tool, arguments, progress_callback=on_progress)
            except Exception as exc:  # recorded for the tests to report
                outcome.error = exc
            outcome.seconds = time.monotonic() - started

        await asyncio.gather(*(ask(kind) for kind in kinds))
        if "approve" in kinds:
            # The approved delete really happened: the message is gone.
            decisions.reads_after[mode] = await client.call_tool("mailbox__read", ASKS[mode]["approve"][1])


def _scenario(name: str, host_ready: Callable[[], GatewayHost], decisions: Decisions, kinds: tuple[str, ...]) -> None:
    started = time.monotonic()
    try:
        host = host_ready()
        stop = threading.Event()
        thread = threading.Thread(target=person, args=(host, decisions, stop), name="person", daemon=True)

        async def agents() -> None:
            if "approve" in kinds:
                thread.start()
            try:
                await asyncio.gather(*(one_agent(host, decisions, mode, kinds) for mode in MODES))
            finally:
                stop.set()
                if thread.is_alive():
                    await asyncio.to_thread(thread.join, CLI_TIMEOUT)

        asyncio.run(agents())
        decisions.ledgers[name] = host.calls("--limit", "20")
    except BaseException as exc:  # reported by the tests
        decisions.errors[name] = exc
    finally:
        decisions.seconds[name] = time.monotonic() - started


def run_approvals(host_ready: Callable[[], GatewayHost], decisions: Decisions) -> None:
    _scenario("approvals", host_ready, decisions, ("approve", "deny"))


def run_expiry(host_ready: Callable[[], GatewayHost], decisions: Decisions) -> None:
    _scenario("expiry", host_ready, decisions, ("expire",))
