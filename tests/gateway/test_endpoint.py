"""The agents' endpoint (/mcp) end to end, with the official SDK client in both modes.

Every test talks to a real host (`manage.py run`, see conftest.py) with `mcp.Client` over
Streamable HTTP, in `mode="auto"` (which settles on 2026-07-28 here) and `mode="legacy"`
(the 2025-11-25 `initialize` handshake and its session). Tokens, approvals, denials,
catalog imports and the ledger go through the `manage.py mcp` CLI, as an operator would.

Approvals happen "in another thread": while the agents' `call_tool` calls are awaiting, a
person thread polls `mcp calls --json --status waiting` until the calls show up, then runs
`mcp approve ID` / `mcp deny ID --reason ...`; on another host nobody decides and the calls
expire. Those scenarios (approvals.py) run on their own hosts in background threads from
the first test of this folder (conftest.py), so their waiting overlaps the other tests; the
tests at the end of this file join them and check what they recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client

from tests.gateway.agents import MODES, agent, text, tool_names
from tests.gateway.approvals import ASKS, DENIAL_REASON, Decisions, Outcome
from tests.gateway.conftest import BUNDLED_TOOLS, CLI_TIMEOUT, STATUS_TOOL, GatewayHost, _Hosts, raw_initialize
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

# -- the door: tokens and Origin ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_client_cannot_connect_with_a_bad_token(main_host: GatewayHost, mode: str) -> None:
    async def connect() -> None:
        headers = {"Authorization": "Bearer pb_not-a-token"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            mcp.Client(streamable_http_client(main_host.mcp_url, http_client=http), mode=mode) as client,
        ):
            await client.list_tools()

    # The SDK reports the 401 as an MCPError (-32603 "Server returned an error response")
    # inside its task groups; in auto mode the 401 to server/discover reads as "legacy",
    # and the initialize fallback gets 401 too.
    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(connect())
    assert caught.group_contains(mcp.MCPError), caught.value


def test_a_foreign_origin_gets_403(main_host: GatewayHost) -> None:
    token = main_host.tokens["agent-auto"]
    foreign = raw_initialize(main_host, {"Authorization": f"Bearer {token}", "Origin": "http://evil.example"})
    assert foreign.status_code == 403, foreign.text
    # The Origin check comes first: no hint about tokens to a foreign page.
    assert raw_initialize(main_host, {"Origin": "http://evil.example"}).status_code == 403
    own = raw_initialize(main_host, {"Authorization": f"Bearer {token}", "Origin": main_host.url})
    assert own.status_code == 200, own.text


# -- listing and calling ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_lists_the_catalog_and_the_status_tool(main_host: GatewayHost, mode: str) -> None:
    async def scenario() -> list[types.Tool]:
        async with agent(main_host, f"agent-{mode}", mode) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in asyncio.run(scenario())}
    assert set(tools) == BUNDLED_TOOLS | {STATUS_TOOL}
    assert tools["mailbox__search"].annotations.read_only_hint is True
    assert tools["mailbox__delete"].annotations.destructive_hint is True
    assert tools["tasks__add"].annotations.read_only_hint is False
    assert tools["tasks__add"].annotations.destructive_hint is False
    assert tools[STATUS_TOOL].annotations.read_only_hint is True
    assert tools[STATUS_TOOL].input_schema["required"] == ["call_id"]


@pytest.mark.parametrize("mode", MODES)
def test_a_read_only_call_answers_with_the_tool_result(main_host: GatewayHost, mode: str) -> None:
    """(That it ran at once, decision `run`, is in the ledger test below.)"""

    async def scenario() -> types.CallToolResult:
        async with agent(main_host, f"agent-{mode}", mode) as client:
            return await client.call_tool("mailbox__search", {"query": "invoice"})

    result = asyncio.run(scenario())
    assert not result.is_error, text(result)
    assert result.structured_content["total"] == 2
    assert {m["id"] for m in result.structured_content["messages"]} >= {"msg-0002"}
    assert json.loads(text(result))["total"] == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_write_call_goes_through_the_outbox_and_answers_with_the_tool_result(
    main_host: GatewayHost, mode: str
) -> None:
    title = f"Written by the {mode} agent"

    async def scenario() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with agent(main_host, f"agent-{mode}", mode) as client:
            added = await client.call_tool("tasks__add", {"title": title})
            listed = await client.call_tool("tasks__list", {})
            return added, listed

    added, listed = asyncio.run(scenario())
    assert not added.is_error, text(added)
    assert added.structured_content["title"] == title
    task_id = added.structured_content["id"]
    assert task_id in {t["id"] for t in listed.structured_content["tasks"]}
    # (That it went through the outbox, for this agent, is in the ledger test below.)


@pytest.mark.parametrize("mode", MODES)
def test_a_token_limited_to_one_server_sees_and_calls_only_its_tools(main_host: GatewayHost, mode: str) -> None:
    async def scenario() -> tuple[set[str], types.CallToolResult, types.CallToolResult]:
        async with agent(main_host, "mail-only", mode) as client:
            names = await tool_names(client)
            other = await client.call_tool("tasks__list", {})
            own = await client.call_tool("mailbox__read", {"message_id": "msg-0001"})
            return names, other, own

    names, other, own = asyncio.run(scenario())
    assert names == {n for n in BUNDLED_TOOLS if n.startswith("mailbox__")} | {STATUS_TOOL}
    assert other.is_error and "tasks__list" in text(other), text(other)
    assert not own.is_error and own.structured_content["id"] == "msg-0001"


# -- past PATCHBAY_AGENT_APPROVAL_WAIT (4 s on the main host) --------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_past_the_approval_wait_the_agent_gets_the_call_id_and_asks_for_its_status(
    main_host: GatewayHost, mode: str
) -> None:
    """The answer is not an error: it names the call and the status tool, which then reports it.

    Read with the SDK session's `send_request` (no client-side output-schema check): see
    the xfail test below for what `call_tool` does with this answer.
    """
    message = {"auto": "msg-0005", "legacy": "msg-0006"}[mode]
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, msg: str | None) -> None:
        progress.append((value, total, msg))

    async def scenario() -> tuple[types.CallToolResult, float, types.CallToolResult, types.CallToolResult]:
        async with agent(main_host, f"agent-{mode}", mode) as client:
            started = time.monotonic()
            request = types.CallToolRequest(
                params=types.CallToolRequestParams(name="mailbox__delete", arguments={"message_id": message})
            )
            pending = await client.session.send_request(request, types.CallToolResult, progress_callback=on_progress)
            seconds = time.monotonic() - started
            call_id = (pending.structured_content or {}).get("call_id")
            status = await client.call_tool(STATUS_TOOL, {"call_id": call_id})
        # Another agent cannot read this agent's call.
        async with agent(main_host, "mail-only", mode) as other:
            foreign = await other.call_tool(STATUS_TOOL, {"call_id": call_id})
        return pending, seconds, status, foreign

    pending, seconds, status, foreign = asyncio.run(scenario())
    assert not pending.is_error, text(pending)
    call_id = pending.structured_content["call_id"]
    assert isinstance(call_id, int)
    assert f"Call #{call_id}" in text(pending)
    assert STATUS_TOOL in text(pending) and f'"call_id": {call_id}' in text(pending)
    assert pending.structured_content["status"] == "waiting"
    assert 3.5 <= seconds < 30, seconds
    assert progress and all(f"Call #{call_id}" in (m or "") for _, _, m in progress), progress

    assert not status.is_error, text(status)
    assert status.structured_content == {"call_id": call_id, "tool": "mailbox__delete", "status": "waiting"}
    assert foreign.is_error and f"#{call_id}" in text(foreign)


def test_the_sdk_clients_call_tool_accepts_the_still_waiting_answer(main_host: GatewayHost) -> None:
    async def scenario() -> types.CallToolResult:
        async with agent(main_host, "agent-auto", "auto") as client:
            return await client.call_tool("mailbox__delete", {"message_id": "msg-0007"})

    result = asyncio.run(scenario())
    assert not result.is_error and STATUS_TOOL in text(result)


# -- the catalog changes ---------------------------------------------------------------------------


@dataclass
class CatalogChange:
    import_output: str = ""
    lists: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # mode -> stage -> names
    modern_events: dict[str, int] = field(default_factory=dict)  # stage -> events heard
    list_latency: dict[str, float] = field(default_factory=dict)  # stage -> s from the CLI's exit to the new list
    legacy_notifications: list[tuple[str, float]] = field(default_factory=list)  # (stage, t)


def _servers_file(path: Path, *, mirror_enabled: bool) -> Path:
    """`mirror`: a trusted second mailbox; `stranger`: an untrusted tasks server (its tools quarantined)."""
    servers = {
        "mirror": {
            "command": "python",
            "args": ["-m", "servers.mailbox", "--data-dir", str(path.parent / "mirror-data")],
            "trusted": True,
        },
        "stranger": {"command": "python", "args": ["-m", "servers.tasks", "--data-dir", str(path.parent / "stranger")]},
    }
    if not mirror_enabled:
        servers["mirror"]["enabled"] = False
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.fixture(scope="module")
def catalog_change(main_host: GatewayHost, tmp_path_factory: pytest.TempPathFactory) -> CatalogChange:
    """Two agents connected (one per mode) while an operator adds servers, then disables one.

    The modern agent listens on `subscriptions/listen`; the legacy one keeps its session
    (and its GET stream) and records `notifications/tools/list_changed` with its
    `message_handler`.
    """
    tmp = tmp_path_factory.mktemp("catalog-change")
    add = _servers_file(tmp / "add.json", mirror_enabled=True)
    disable = _servers_file(tmp / "disable.json", mirror_enabled=False)
    seen = CatalogChange()
    stage = "before"

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen.legacy_notifications.append((stage, time.monotonic()))

    async def wait_for_list(client: mcp.Client, want: Any, what: str) -> set[str]:
        deadline = time.monotonic() + 45
        while True:
            names = await tool_names(client)
            if want(names) or time.monotonic() > deadline:
                assert want(names), f"timed out waiting for {what}: {sorted(names)}"
                return names
            await asyncio.sleep(0.3)

    async def scenario() -> None:
        nonlocal stage
        async with (
            agent(main_host, "agent-legacy", "legacy", message_handler=on_message) as old,
            agent(main_host, "agent-auto", "auto") as new,
        ):
            seen.lists = {"auto": {"before": await tool_names(new)}, "legacy": {"before": await tool_names(old)}}
            async with new.listen(tools_list_changed=True) as subscription:

                async def pump() -> None:
                    async for _event in subscription:
                        seen.modern_events[stage] = seen.modern_events.get(stage, 0) + 1

                pumping = asyncio.ensure_future(pump())
                try:
                    for stage_name, document, want in (
                        ("added", add, lambda n: "mirror__search" in n),
                        ("disabled", disable, lambda n: "mirror__search" not in n),
                    ):
                        stage = stage_name
                        args = ["import", str(document)] + (["--refresh"] if stage_name == "added" else [])
                        done = await asyncio.to_thread(main_host.mcp, *args)
                        seen.import_output += done.stdout + done.stderr
                        # Both agents see the new list (at once when the endpoint heard the
                        # change, else once its 30 s cache runs out) ...
                        imported = time.monotonic()
                        seen.lists["auto"][stage] = await wait_for_list(new, want, f"auto list {stage}")
                        seen.list_latency[stage] = round(time.monotonic() - imported, 1)
                        seen.lists["legacy"][stage] = await wait_for_list(old, want, f"legacy list {stage}")
                        # ... and the listeners heard of it (a last moment for stragglers).
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(2):
                                while not seen.modern_events.get(stage) or not [
                                    n for n in seen.legacy_notifications if n[0] == stage
                                ]:
                                    await asyncio.sleep(0.1)
                finally:
                    pumping.cancel()
                    with contextlib.suppress(BaseException):
                        await pumping

    asyncio.run(scenario())
    return seen


MIRROR_TOOLS = {"mirror__archive", "mirror__delete", "mirror__read", "mirror__search", "mirror__send"}


def test_quarantined_tools_are_not_listed(catalog_change: CatalogChange) -> None:
    # The untrusted server's tools are in the catalog, quarantined as new ...
    assert re.search(r"stranger: 4 tools \(4 added, 4 quarantined\)", catalog_change.import_output), (
        catalog_change.import_output
    )
    # ... and no agent sees them.
    for mode in MODES:
        for stage, names in catalog_change.lists[mode].items():
            assert not {n for n in names if n.startswith("stranger__")}, (mode, stage, sorted(names))


@pytest.mark.parametrize("mode", MODES)
def test_the_list_follows_the_catalog(catalog_change: CatalogChange, mode: str) -> None:
    lists = catalog_change.lists[mode]
    assert lists["before"] == BUNDLED_TOOLS | {STATUS_TOOL}
    assert lists["added"] == lists["before"] | MIRROR_TOOLS
    assert lists["disabled"] == lists["before"]


def test_a_modern_client_hears_list_changed_on_its_listen_stream(catalog_change: CatalogChange) -> None:
    """Adding servers with --refresh sends a burst of catalog events over several seconds.

    Only that stage is asserted: disabling a server sends a single event, which the
    endpoint can lose when it lands in its listener's reconnect gap (see the xfail test
    test_the_endpoint_keeps_its_subscription_to_catalog_events; it happened in one of the
    runs made while writing this); the list still follows once the cache's 30 s TTL runs out.
    """
    assert catalog_change.modern_events.get("added", 0) >= 1, (
        catalog_change.modern_events,
        catalog_change.list_latency,
    )


def test_a_legacy_client_gets_tools_list_changed(catalog_change: CatalogChange) -> None:
    stages = {stage for stage, _ in catalog_change.legacy_notifications}
    assert {"added", "disabled"} <= stages, catalog_change.legacy_notifications


# -- the door, again: bad and revoked tokens (the revoke ran in the background meanwhile) ---------------


def test_without_a_valid_token_the_endpoint_answers_401(main_host: GatewayHost) -> None:
    # conftest.py checked that `revoked-bot` worked, then started `mcp token revoke revoked-bot`.
    assert main_host.revoking is not None
    out, err = main_host.revoking.communicate(timeout=CLI_TIMEOUT)
    assert main_host.revoking.returncode == 0, out + err
    assert "revoked the token of revoked-bot" in out
    revoked = main_host.tokens["revoked-bot"]
    cases = {
        "no header": {},
        "unknown token": {"Authorization": "Bearer pb_" + "x" * 43},
        "not a bearer": {"Authorization": f"Basic {main_host.tokens['agent-auto']}"},
        "empty bearer": {"Authorization": "Bearer"},
        "revoked token": {"Authorization": f"Bearer {revoked}"},
    }
    for label, headers in cases.items():
        response = raw_initialize(main_host, headers)
        if label == "revoked token" and response.status_code == 200:
            # The revocation reaches the web process's token cache as an event (well within a
            # second on an idle machine; conftest's check of the token may still be cached).
            response = wait_until(
                functools.partial(_refused, main_host, headers),
                timeout=3,
                interval=0.1,
                what="the revoked token refused",
            )
        assert response.status_code == 401, (label, response.status_code, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer "), label
        assert "pb_" not in response.text, label


def _refused(host: GatewayHost, headers: dict[str, str]) -> Any:
    """The answer to an initialize with `headers`, once it is not a 200 (else None)."""
    response = raw_initialize(host, headers)
    return response if response.status_code != 200 else None


# -- the ledger ------------------------------------------------------------------------------------


def test_every_agent_call_is_in_the_ledger_with_its_agent(main_host: GatewayHost) -> None:
    async def scenario() -> None:
        async with agent(main_host, "agent-auto", "auto") as client:
            await client.call_tool("calendar__list", {})
            await client.call_tool("mailbox__archive", {"message_id": "msg-0003"})
        async with agent(main_host, "mail-only", "legacy") as client:
            await client.call_tool("mailbox__read", {"message_id": "msg-0004"})

    asyncio.run(scenario())
    rows = main_host.calls("--limit", "3")
    got = [(r["tool"], r["requester"], r["requester_kind"], r["decision"], r["status"]) for r in rows]
    assert got == [
        ("mailbox__read", "mail-only", "agent", "run", "succeeded"),
        ("mailbox__archive", "agent-auto", "agent", "outbox", "succeeded"),
        ("calendar__list", "agent-auto", "agent", "run", "succeeded"),
    ], got


# -- destructive calls: a person decides in another thread (approvals host) ---------------------------


def _outcome(decisions: Decisions, mode: str, kind: str) -> Outcome:
    assert decisions.person_error is None, (
        f"the person thread failed: {decisions.person_error!r}\n{decisions.person_log}"
    )
    outcome = decisions.outcomes[mode][kind]
    assert outcome.error is None, f"{mode} {kind}: call_tool raised {outcome.error!r}"
    assert outcome.result is not None
    return outcome


@pytest.mark.parametrize("mode", MODES)
def test_a_destructive_call_approved_by_a_person_returns_the_real_result(decisions: Decisions, mode: str) -> None:
    outcome = _outcome(decisions, mode, "approve")
    message_id = ASKS[mode]["approve"][1]["message_id"]
    result = outcome.result
    assert not result.is_error, text(result)
    assert result.structured_content["id"] == message_id
    assert result.structured_content["deleted"] is True
    assert result.structured_content["subject"]
    assert json.loads(text(result))["id"] == message_id
    # It waited for the person, with progress meanwhile.
    assert outcome.progress and "waiting for a person's approval" in (outcome.progress[0][2] or "")
    after = decisions.reads_after[mode]
    assert after.is_error and message_id in text(after), text(after)


@pytest.mark.parametrize("mode", MODES)
def test_a_denied_call_is_an_error_carrying_the_reason(decisions: Decisions, mode: str) -> None:
    outcome = _outcome(decisions, mode, "deny")
    call_id = decisions.decided[(f"agent-{mode}", "tasks__delete")]
    assert outcome.result.is_error
    assert f"Call #{call_id} was denied by cli" in text(outcome.result)
    assert DENIAL_REASON in text(outcome.result)


@pytest.mark.parametrize("mode", MODES)
def test_a_call_nobody_approves_expires_as_an_error(decisions: Decisions, mode: str) -> None:
    outcome = _outcome(decisions, mode, "expire")
    assert outcome.result.is_error
    assert re.search(r"Call #\d+ expired: nobody approved it in time", text(outcome.result)), text(outcome.result)
    # PATCHBAY_APPROVAL_TTL=10 and a sweep every 5 s; PATCHBAY_AGENT_APPROVAL_WAIT=120 is far off.
    assert 9 <= outcome.seconds < 115, outcome.seconds


@pytest.mark.parametrize("mode", MODES)
def test_a_client_with_a_progress_callback_hears_progress_while_it_waits(decisions: Decisions, mode: str) -> None:
    outcome = _outcome(decisions, mode, "expire")
    # One at once, then one every 5 s while the call waits its 10-15 s.
    assert len(outcome.progress) >= 2, outcome.progress
    values = [value for value, _, _ in outcome.progress]
    assert values == sorted(values) and len(set(values)) == len(values), values
    assert all(re.match(r"Call #\d+ is waiting for a person's approval$", m or "") for _, _, m in outcome.progress)


def test_the_ledger_records_each_decision_and_the_agent(decisions: Decisions) -> None:
    assert decisions.person_error is None, decisions.person_log
    for host, kinds in (("approvals", {"approve": "succeeded", "deny": "denied"}), ("expiry", {"expire": "expired"})):
        by_key = {(r["requester"], r["tool"]): r for r in decisions.ledgers[host]}
        for mode in MODES:
            for kind, status in kinds.items():
                row = by_key[(f"agent-{mode}", ASKS[mode][kind][0])]
                assert row["requester_kind"] == "agent", row
                assert row["decision"] == "ask", row
                assert row["status"] == status, row
    approvals_rows = {(r["requester"], r["tool"]): r for r in decisions.ledgers["approvals"]}
    for mode in MODES:  # the read of the deleted message ran at once, and failed
        row = approvals_rows[(f"agent-{mode}", "mailbox__read")]
        assert (row["decision"], row["status"]) == ("run", "failed"), row


def test_the_endpoint_keeps_its_subscription_to_catalog_events(main_host: GatewayHost) -> None:
    assert raw_initialize(main_host, {"Authorization": f"Bearer {main_host.tokens['agent-auto']}"}).status_code == 200
    lost = "the agents' endpoint lost the channel layer"
    # Idle for 15 s at most (the listener starts with the first /mcp request): no reconnects.
    deadline = time.monotonic() + 15
    while lost not in main_host.output and time.monotonic() < deadline:
        time.sleep(0.5)
    assert lost not in main_host.output, [line for line in main_host.lines if lost in line][:3]


def test_the_hosts_logged_no_traceback(gateway_hosts: _Hosts) -> None:
    """Last in the file: nothing above made a host process crash or log a traceback."""
    for name, host in gateway_hosts.started.items():
        assert host.proc.poll() is None, f"{name} exited:\n{host.output[-3000:]}"
        assert "Traceback" not in host.output, f"{name}:\n{host.output[-6000:]}"
