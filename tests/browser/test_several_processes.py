"""Two web processes and two workers on one PostgreSQL and one Redis, as a team runs them.

`manage.py run --web 2 --workers 2` on a database and a Redis database of this test's own
(the real servers CI has): web 1 on PORT, web 2 on PORT+1. Through them:

- agents on both web processes call tools, in both eras;
- a destructive call waiting on web 1 is approved through web 2 (the call's page, as a
  person does) and the agent on web 1 has its answer within a second;
- a rule created through web 2 (admin) applies to the next calls on web 1 within a second;
  a server disabled through web 2 leaves the tool list of web 1's agents within a second;
- the outbox drains 40 writes through both workers while one of them is SIGKILLed: every
  action done, and the tasks server's own records hold one task per idempotency key;
- a live page on web 1 (a real browser) shows a call made on web 2 without a reload;
- behind the compose file's proxy (HAProxy with `deploy/haproxy.cfg`, its server list
  pointed at the two web processes), a 2025-era session stays on the process that began
  it; that process SIGKILLed, the session answers 404 (start again), at once;
- a token revoked (`mcp token revoke`, a process of its own) is refused by both web
  processes within a second, though each checked it a moment before.

It runs in the PostgreSQL pass of the suite (`DATABASE_URL` set to PostgreSQL): that is
where it learns something the other pass would not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import httpx2
import mcp
import psutil
import psycopg
import pytest
import redis
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, expect

from tests.helpers import REPO, free_port, wait_until
from tests.host import RunningHost, login

pytestmark = pytest.mark.slow

T = TypeVar("T")

SUITE_DATABASE = os.environ.get("DATABASE_URL", "")
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
HAPROXY = shutil.which("haproxy")
LEGACY = "2025-11-25"
WRITES = 40
MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def _two_free_ports() -> int:
    """A port whose next one is free too (web 1 and web 2)."""
    for _ in range(50):
        port = free_port()
        if port < 65535:
            with contextlib.suppress(OSError), closing(socket.socket()) as probe:
                probe.bind(("127.0.0.1", port + 1))
                return port
    raise AssertionError("no two free ports in a row")


@pytest.fixture
def database() -> Iterator[str]:
    """A PostgreSQL database of this test's own on the suite's server; its URL."""
    if not SUITE_DATABASE.startswith(("postgres://", "postgresql://")):
        pytest.skip("runs in the PostgreSQL pass (DATABASE_URL=postgres://...)")
    name = f"pb_several_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(SUITE_DATABASE)
    admin = urlunsplit(parts._replace(scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database of this test's own on the suite's Redis server, empty."""
    base = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    url = urlunsplit(base._replace(path="/13"))
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def team(tmp_path: Path, database: str, redis_url: str) -> Iterator[RunningHost]:
    host = RunningHost(
        tmp_path,
        "--web",
        "2",
        "--workers",
        "2",
        "--concurrency",
        "4",
        port=_two_free_ports(),
        env={
            "DATABASE_URL": database,
            "REDIS_URL": redis_url,
            "PATCHBAY_OUTBOX_LEASE": "5",
            "PATCHBAY_LOG_LEVEL": "INFO",
        },
    )
    try:
        host.wait_ready()
        wait_until(lambda: _up(_web2(host)), timeout=60, what=f"web 2 to answer\n{host.output}")
        host.wait_for_tools("mailbox__read", "mailbox__delete", "tasks__add")
        yield host
    finally:
        host.stop()


def _web2(host: RunningHost) -> str:
    return f"http://127.0.0.1:{host.port + 1}"


def _up(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    return False


def _rows(database: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(urlunsplit(urlsplit(database)._replace(scheme="postgresql"))) as conn:
        return conn.execute(query, params).fetchall()


@contextlib.asynccontextmanager
async def _agent(url: str, token: str, mode: str) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0)) as http,
        mcp.Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
    ):
        assert client.protocol_version == MODES[mode]
        yield client


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run the agents' side in a thread of its own: Playwright's sync API holds this one's loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coro).result()


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def _form_post(client: httpx.Client, page: str, action: str, data: dict[str, str]) -> httpx.Response:
    """Submit a form as the browser does: the page's CSRF token, then the POST."""
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(page).text)
    assert found, f"no form on {page}"
    return client.post(
        action,
        data={"csrfmiddlewaretoken": found.group(1), **data},
        headers={"Referer": f"{client.base_url}{page}"},
        follow_redirects=False,
    )


@contextlib.contextmanager
def _proxy(tmp_path: Path, web_ports: tuple[int, int]) -> Iterator[str]:
    """HAProxy with deploy/haproxy.cfg, listening on a port of its own, with the two web
    processes where Docker's DNS would give the web containers."""
    if HAPROXY is None:
        reason = "haproxy is not installed (apt-get install haproxy)"
        if IN_CI:
            pytest.fail(f"{reason}; CI is set, so this fails instead of skipping")
        pytest.skip(reason)
    port = free_port()
    text = (REPO / "deploy" / "haproxy.cfg").read_text()
    template = re.search(r"^\s*server-template web .*$", text, re.M)
    assert template and "bind :8080" in text
    servers = "\n".join(
        f"    server web{i} 127.0.0.1:{p} check inter 1s fall 2 rise 1" for i, p in enumerate(web_ports, 1)
    )
    config = tmp_path / "haproxy.cfg"
    config.write_text(text.replace("bind :8080", f"bind 127.0.0.1:{port}").replace(template.group(0), servers))
    proc = subprocess.Popen(
        [HAPROXY, "-db", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(url), timeout=20, what="haproxy to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _legacy_post(url: str, token: str, body: dict[str, Any], session: str | None) -> httpx.Response:
    """One 2025-era JSON-RPC POST to /mcp, as the SDK's client sends it."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": LEGACY,
    }
    if session:
        headers["Mcp-Session-Id"] = session
    return httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=10)


def _legacy_session(url: str, token: str) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
    }
    response = _legacy_post(url, token, init, None)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = _legacy_post(url, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    assert done.status_code == 202, done.text
    return session


def _list_tools(url: str, token: str, session: str, n: int = 1) -> int:
    return _legacy_post(url, token, {"jsonrpc": "2.0", "id": 10 + n, "method": "tools/list"}, session).status_code


def _web_pid(port: int) -> int:
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        joined = " ".join(cmdline)
        if "hostapp.core.web" in joined and "lifeline" not in joined and str(port) in cmdline:
            return proc.pid
    raise AssertionError(f"no web process on port {port}")


def _worker_pid(number: int) -> int:
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "celery" in " ".join(cmdline) and f"worker{number}@%h" in cmdline and "lifeline" not in " ".join(cmdline):
            return proc.pid
    raise AssertionError(f"worker {number} is not running")


def test_two_web_processes_and_two_workers_on_one_database(
    team: RunningHost, database: str, browser: Browser, tmp_path: Path
) -> None:
    web1, web2 = team.url, _web2(team)
    token = json.loads(team.manage("mcp", "token", "create", "agent", "--json"))["token"]
    assert "More web processes at" in team.output and f"{web2}/" in team.output

    # A live page on web 1, open before anything else happens.
    context = browser.new_context(base_url=web1)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(team.admin_password)
    page.get_by_role("button", name="Log in").click()
    page.goto("/calls/")
    expect(page.get_by_role("heading", name="Calls")).to_be_visible()

    async def both_eras_on_both() -> None:
        for url in (web1, web2):
            for mode in MODES:
                async with _agent(url, token, mode) as client:
                    result = await client.call_tool("mailbox__read", {"message_id": "msg-0001"})
                    assert not result.is_error, _text(result)
                    assert "msg-0001" in _text(result)

    _run(both_eras_on_both())
    read_calls = _rows(database, "SELECT id FROM calls_call WHERE tool_name = 'mailbox__read' ORDER BY id")
    assert len(read_calls) == 4

    # The live page on web 1 shows the calls made through web 2, without a reload.
    last_on_web2 = read_calls[-1][0]
    expect(page.locator(f'a[href="/calls/{last_on_web2}/"]').first).to_be_visible(timeout=5_000)

    # A destructive call waits on web 1; a person approves it through web 2.
    person = login(web2, "admin", team.admin_password)
    answered: dict[str, float] = {}

    async def destructive_on_web1() -> None:
        async with _agent(web1, token, "legacy") as client:
            result = await client.call_tool("mailbox__delete", {"message_id": "msg-0002"})
            answered["at"] = time.monotonic()
            assert not result.is_error, _text(result)

    async def approve_through_web2() -> float:
        def waiting() -> int | None:
            rows = _rows(
                database, "SELECT id FROM calls_call WHERE tool_name = 'mailbox__delete' AND status = 'waiting'"
            )
            return rows[0][0] if rows else None

        call_id = await asyncio.to_thread(wait_until, waiting, 30, 0.05, "the destructive call to wait")
        page = f"/calls/{call_id}/"
        found = re.search(
            r'name="csrfmiddlewaretoken" value="([^"]+)"', (await asyncio.to_thread(person.get, page)).text
        )
        assert found, "no approval form on the call's page"
        approved_at = time.monotonic()  # from the moment the person presses Approve
        response = await asyncio.to_thread(
            person.post,
            f"/calls/{call_id}/approve/",
            data={"csrfmiddlewaretoken": found.group(1)},
            headers={"Referer": f"{web2}{page}"},
            follow_redirects=False,
        )
        assert response.status_code == 302, response.text
        return approved_at

    async def approval() -> float:
        agent_task = asyncio.create_task(destructive_on_web1())
        approved_at = await approve_through_web2()
        await asyncio.wait_for(agent_task, timeout=30)
        return approved_at

    approved_at = _run(approval())
    events = _rows(
        database,
        "SELECT e.kind, e.at FROM calls_callevent e JOIN calls_call c ON c.id = e.call_id "
        "WHERE c.tool_name = 'mailbox__delete' ORDER BY e.id",
    )
    assert answered["at"] - approved_at < 1.0, (
        f"answered {answered['at'] - approved_at:.2f}s after the approval; the call's events: {events}"
        + team.output[-8000:]
    )

    # A rule created through web 2 (admin) applies to the next calls on web 1.
    async def blocked_on_web1_after_rule() -> float:
        async with _agent(web1, token, "auto") as client:
            first = await client.call_tool("mailbox__read", {"message_id": "msg-0003"})
            assert not first.is_error  # allowed, and now in web 1's short decision cache
            response = await asyncio.to_thread(
                _form_post,
                person,
                "/admin/calls/rule/add/",
                "/admin/calls/rule/add/",
                {"server_name": "mailbox", "tool_name": "mailbox__read", "action": "block", "reason": "no reading"},
            )
            assert response.status_code == 302, response.text[:2000]
            created = time.monotonic()
            while True:
                result = await client.call_tool("mailbox__read", {"message_id": "msg-0003"})
                if result.is_error:
                    assert "no reading" in _text(result) or "block" in _text(result).lower(), _text(result)
                    return time.monotonic() - created
                assert time.monotonic() - created < 5, "the rule did not reach web 1"
                await asyncio.sleep(0.1)

    took = _run(blocked_on_web1_after_rule())
    assert took < 1.0, f"the rule took {took:.2f}s to reach web 1"

    # A server disabled through web 2 leaves the catalog web 1's agents see.
    async def calendar_gone_from_web1() -> float:
        async with _agent(web1, token, "legacy") as client:
            assert "calendar__list" in {t.name for t in (await client.list_tools()).tools}
            response = await asyncio.to_thread(
                _form_post, person, "/servers/calendar/", "/servers/calendar/enable/", {"enabled": "0"}
            )
            assert response.status_code == 302, response.text[:2000]
            disabled = time.monotonic()
            while "calendar__list" in {t.name for t in (await client.list_tools()).tools}:
                assert time.monotonic() - disabled < 5, "the catalog change did not reach web 1"
                await asyncio.sleep(0.05)
            return time.monotonic() - disabled

    catalog_took = _run(calendar_gone_from_web1())
    assert catalog_took < 1.0, f"the catalog change took {catalog_took:.2f}s to reach web 1"

    # The outbox drains through both workers while worker 1 is SIGKILLed.
    async def writes_on_web2() -> list[Any]:
        async with _agent(web2, token, "auto") as client:
            calls = [client.call_tool("tasks__add", {"title": f"team task {i:02d}"}) for i in range(WRITES)]
            return await asyncio.gather(*calls, return_exceptions=True)

    async def drain_with_a_kill() -> list[Any]:
        writes = asyncio.create_task(writes_on_web2())

        def worker1_busy() -> bool:
            running = _rows(
                database,
                "SELECT count(*) FROM outbox_attempt WHERE worker LIKE 'worker1@%%' AND finished_at IS NULL",
            )
            done = _rows(database, "SELECT count(*) FROM outbox_action WHERE status = 'done'")
            return running[0][0] > 0 and done[0][0] >= 3

        await asyncio.to_thread(wait_until, worker1_busy, 60, 0.02, "worker 1 to hold a delivery")
        os.kill(_worker_pid(1), signal.SIGKILL)
        return await writes

    _run(drain_with_a_kill())

    writes = (
        "SELECT a.idempotency_key, a.status FROM outbox_action a JOIN calls_call c ON c.id = a.call_id "
        "WHERE c.tool_name = 'tasks__add'"
    )
    wait_until(
        lambda: [s for _, s in _rows(database, writes)] == ["done"] * WRITES,
        timeout=120,
        interval=0.5,
        what=f"the outbox to drain\n{team.output[-5000:]}",
    )
    keys = {k for k, _ in _rows(database, writes)}
    assert len(keys) == WRITES
    workers = {w.split("@")[0] for (w,) in _rows(database, "SELECT DISTINCT worker FROM outbox_attempt")}
    assert workers == {"worker1", "worker2"}, workers
    # The supervisor started worker 1 again; what it held when it died was delivered by then.
    wait_until(lambda: "restarting worker1" in team.output, timeout=30, what="worker 1 to be restarted")
    taken_back = _rows(database, "SELECT count(*) FROM outbox_attempt WHERE outcome = 'lease_expired'")[0][0]
    print(
        f"approval on web 2 -> answer on web 1: {answered['at'] - approved_at:.3f}s; "
        f"rule on web 2 -> refused on web 1: {took:.3f}s; server disabled on web 2 -> gone on web 1: "
        f"{catalog_took:.3f}s; leases taken back from the killed worker: {taken_back}"
    )
    tasks_db = tmp_path / "servers" / "tasks.sqlite3"
    with closing(sqlite3.connect(f"file:{tasks_db}?mode=ro", uri=True, timeout=10)) as conn:
        titles = [t for (t,) in conn.execute("SELECT title FROM tasks WHERE title LIKE 'team task %'")]
        recorded = {k for (k,) in conn.execute("SELECT key FROM idempotency_keys WHERE tool = 'add'")}
    assert sorted(titles) == [f"team task {i:02d}" for i in range(WRITES)], "one task per call, none twice"
    assert recorded == keys

    # Behind the compose file's proxy: a 2025-era session sticks to the process that began it.
    with _proxy(tmp_path, (team.port, team.port + 1)) as proxy:
        session = _legacy_session(proxy, token)
        assert [_list_tools(proxy, token, session, n) for n in range(8)] == [200] * 8  # round robin would split them
        direct = {url: _list_tools(url, token, session) for url in (web1, web2)}
        assert sorted(direct.values()) == [200, 404], direct  # the other process does not know it
        holder = web1 if direct[web1] == 200 else web2
        os.kill(_web_pid(int(holder.rsplit(":", 1)[1])), signal.SIGKILL)
        killed = time.monotonic()
        # The session's process is gone: the agent is told to start again, not left waiting.
        assert _list_tools(proxy, token, session) == 404
        assert time.monotonic() - killed < 5
        assert _list_tools(proxy, token, _legacy_session(proxy, token)) == 200  # and a new one works

    # A token revoked by a command (a process of its own) is refused everywhere at once.
    wait_until(lambda: _up(web1) and _up(web2), timeout=60, what="the killed web process to be restarted")
    for url in (web1, web2):  # each checks the token now, and keeps the answer for a few seconds
        assert _legacy_post(url, token, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, None).status_code != 401
    team.manage("mcp", "token", "revoke", "agent")
    revoked = time.monotonic()
    for url in (web1, web2):
        wait_until(
            lambda url=url: (
                _legacy_post(url, token, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, None).status_code == 401
            ),
            timeout=5,
            interval=0.05,
            what=f"{url} to refuse the revoked token",
        )
    revoke_took = time.monotonic() - revoked
    assert revoke_took < 1.0, f"the revocation took {revoke_took:.2f}s to reach both web processes"
    print(f"token revoked by a command -> refused by both web processes: {revoke_took:.3f}s")
    context.close()
    person.close()
