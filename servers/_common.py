"""Machinery shared by the bundled servers: data directory, SQLite store, idempotency, CLI.

The idempotency contract (see `servers/README.md`):

* A side-effecting tool call may carry a key in its request `_meta` under
  `dev.patchbay/idempotencyKey` (a non-empty string).
* The first call with a key performs the effect and records `(key, tool, argument digest,
  result JSON)` in the same `BEGIN IMMEDIATE` transaction, so an effect never exists without
  its record, nor a record without its effect; two concurrent calls with one key serialize on
  the write lock and the second sees the first's record.
* A repeated key with the same tool and arguments returns the recorded result unchanged and
  does nothing else. The same key with another tool or other arguments is a tool error.
* A call that fails (a tool error) records nothing: retrying it with the same key runs again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

logger = logging.getLogger("servers")

IDEMPOTENCY_EXTENSION = "dev.patchbay/idempotency"
IDEMPOTENCY_META_KEY = "dev.patchbay/idempotencyKey"
IDEMPOTENCY_SETTINGS: dict[str, Any] = {"metaKey": IDEMPOTENCY_META_KEY}
MAX_KEY_LENGTH = 255
BUSY_TIMEOUT_MS = 10_000
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

ResultT = TypeVar("ResultT", bound=BaseModel)

# --- Tool annotations ---

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
"""Reads local state only."""


def write(*, idempotent: bool) -> ToolAnnotations:
    """A non-destructive write: adds or moves something without losing data."""
    return ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=idempotent, open_world_hint=False
    )


def destructive(*, idempotent: bool) -> ToolAnnotations:
    """A write that removes data or cannot be taken back."""
    return ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=idempotent, open_world_hint=False
    )


# --- Data directory and SQLite ---


def resolve_data_dir(value: str | os.PathLike[str] | None = None) -> Path:
    """`--data-dir` if given, else `$PATCHBAY_DATA_DIR/servers`, else `./var/servers`."""
    if value:
        return Path(value).expanduser().resolve()
    base = os.environ.get("PATCHBAY_DATA_DIR")
    if base:
        return (Path(base).expanduser() / "servers").resolve()
    return (Path.cwd() / "var" / "servers").resolve()


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


_STORE_SCHEMA = """
CREATE TABLE IF NOT EXISTS store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sequences (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    args_digest TEXT NOT NULL,
    result_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


def next_id(conn: sqlite3.Connection, prefix: str) -> str:
    """Allocate the next id for `prefix` (`msg-0007`); never reused, even after a delete.

    Call inside a write transaction: the write lock makes the read-increment safe across processes.
    """
    row = conn.execute(
        "INSERT INTO sequences (name, value) VALUES (?, 1) "
        "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value",
        (prefix,),
    ).fetchone()
    return f"{prefix}-{row[0]:04d}"


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """A stable digest of a call's arguments, to tell a retried call from a different one."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Store:
    """One SQLite file per server, shared by every process serving it (WAL, busy timeout).

    Connections are opened per operation: tools run on worker threads, and an open costs far
    less than a request round trip.
    """

    def __init__(self, path: Path, schema: str, seed: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self.path = path
        self._schema = schema
        self._seed = seed
        self._initialize()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _initialize(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(self._open()) as conn:
            # Persistent for the file; must run outside a transaction.
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in (_STORE_SCHEMA + self._schema).split(";"):
                    if statement.strip():
                        conn.execute(statement)
                seeded = conn.execute("SELECT 1 FROM store_meta WHERE name = 'seeded'").fetchone()
                if seeded is None:
                    if self._seed is not None:
                        self._seed(conn)
                    conn.execute("INSERT INTO store_meta (name, value) VALUES ('seeded', ?)", (now_iso(),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection inside a read transaction (one consistent snapshot)."""
        with contextlib.closing(self._open()) as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("ROLLBACK")

    def write(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        key: str | None,
        result_type: type[ResultT],
        effect: Callable[[sqlite3.Connection], ResultT],
    ) -> ResultT:
        """Run `effect` in one `BEGIN IMMEDIATE` transaction, recording `key` with its result.

        With a key already recorded, returns the recorded result (same tool and arguments) or
        raises a tool error (anything else) without running `effect`.
        """
        digest = argument_digest(arguments)
        with contextlib.closing(self._open()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if key is not None:
                    row = conn.execute(
                        "SELECT tool, args_digest, result_json FROM idempotency_keys WHERE key = ?", (key,)
                    ).fetchone()
                    if row is not None:
                        if row["tool"] != tool:
                            raise ToolError(
                                f"Idempotency key {key!r} was already used for the tool {row['tool']!r}; "
                                f"use a new key for this {tool!r} call."
                            )
                        if row["args_digest"] != digest:
                            raise ToolError(
                                f"Idempotency key {key!r} was already used for a {tool!r} call with different "
                                "arguments; use a new key for a different call."
                            )
                        conn.execute("ROLLBACK")
                        logger.info("Replayed %s for idempotency key %r", tool, key)
                        return result_type.model_validate_json(row["result_json"])
                result = effect(conn)
                if key is not None:
                    conn.execute(
                        "INSERT INTO idempotency_keys (key, tool, args_digest, result_json, created_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (key, tool, digest, result.model_dump_json(), now_iso()),
                    )
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


# --- Idempotency key plumbing ---


def _check_key(value: object, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"The idempotency key in {source} must be a non-empty string.")
    if len(value) > MAX_KEY_LENGTH:
        raise ToolError(f"The idempotency key in {source} is longer than {MAX_KEY_LENGTH} characters.")
    return value


def idempotency_key(ctx: Context[Any, Any], argument: str | None = None) -> str | None:
    """The call's idempotency key: `_meta["dev.patchbay/idempotencyKey"]` and/or an explicit argument.

    When both are present they must be equal.
    """
    meta = ctx.request_context.meta or {}
    from_meta = _check_key(meta[IDEMPOTENCY_META_KEY], "_meta") if IDEMPOTENCY_META_KEY in meta else None
    from_argument = _check_key(argument, "the idempotency_key argument") if argument is not None else None
    if from_meta is not None and from_argument is not None and from_meta != from_argument:
        raise ToolError(
            f"The idempotency_key argument ({from_argument!r}) differs from the key in _meta "
            f"[{IDEMPOTENCY_META_KEY!r}] ({from_meta!r}); send one key, or the same key in both."
        )
    return from_meta if from_meta is not None else from_argument


class IdempotencyExtension(Extension):
    """Advertises the idempotency contract under `capabilities.extensions["dev.patchbay/idempotency"]`.

    The tools apply the contract themselves (the effect and the key record share a transaction);
    this extension only announces it.
    """

    identifier = IDEMPOTENCY_EXTENSION

    def settings(self) -> dict[str, Any]:
        return dict(IDEMPOTENCY_SETTINGS)


async def advertise_experimental(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: mirror the idempotency ad under `capabilities.experimental`.

    `capabilities.extensions` exists only in the 2026-07-28 schema; the SDK sieves an `initialize`
    result through the handshake-era schema, which drops it. `experimental` exists in both eras,
    so the same settings are added there to the `initialize` and `server/discover` results.
    """
    result = await call_next(ctx)
    if ctx.method not in ("initialize", "server/discover") or not isinstance(result, dict):
        return result
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict):
        return result
    experimental = dict(capabilities.get("experimental") or {})
    experimental[IDEMPOTENCY_EXTENSION] = dict(IDEMPOTENCY_SETTINGS)
    return {**result, "capabilities": {**capabilities, "experimental": experimental}}


def new_server(name: str, *, title: str, instructions: str, log_level: str = "INFO") -> MCPServer:
    """An `MCPServer` that advertises the idempotency extension in both protocol eras."""
    return MCPServer(
        name,
        title=title,
        instructions=instructions,
        version="1.0.0",
        extensions=[IdempotencyExtension()],
        middleware=[advertise_experimental],
        log_level=log_level,  # type: ignore[arg-type]
    )


# --- CLI ---


def parse_args(prog: str, argv: list[str] | None = None, *, default_port: int = 8000) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=f"Patchbay's bundled {prog.rsplit('.', 1)[-1]} MCP server.")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address, loopback only (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=default_port, help=f"HTTP port (default: {default_port})")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="directory for the SQLite file (default: $PATCHBAY_DATA_DIR/servers, else ./var/servers)",
    )
    parser.add_argument(
        "--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="WARNING", help="stderr log level"
    )
    args = parser.parse_args(argv)
    if args.host not in LOOPBACK_HOSTS:
        parser.error(f"--host must be a loopback address ({', '.join(LOOPBACK_HOSTS)}), not {args.host!r}")
    if not 0 < args.port < 65536:
        parser.error(f"--port must be between 1 and 65535, not {args.port}")
    return args


def main(
    prog: str, build: Callable[[Path, str], MCPServer], argv: list[str] | None = None, *, default_port: int = 8000
) -> None:
    """Parse the CLI and serve: stdio (stdout carries only MCP messages) or Streamable HTTP at `/mcp`."""
    args = parse_args(prog, argv, default_port=default_port)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    data_dir = resolve_data_dir(args.data_dir)
    server = build(data_dir, args.log_level)
    logger.info("%s: data in %s, transport %s", prog, data_dir, args.transport)
    try:
        if args.transport == "stdio":
            server.run("stdio")
        else:
            # host is loopback, so the SDK turns on its DNS-rebinding (Host/Origin) protection.
            server.run("streamable-http", host=args.host, port=args.port, streamable_http_path="/mcp")
    except KeyboardInterrupt:
        pass
