"""A hardened stdio transport for the SDK's client.

The SDK's own ``stdio_client`` trusts the child: it buffers lines without a limit, sends
stderr to a file and hands the environment's defaults to the child. A host of untrusted
servers needs more, so this transport sits under ``mcp.Client`` in its place:

* the child's environment is an allow-list of the host's variables plus the configured
  ones: a host secret (``SECRET_KEY``, ``DATABASE_URL``) never reaches it;
* the child runs in its own session (process group);
* stderr is drained continuously into a bounded tail, so a server that floods stderr
  never blocks, and a crashed server can explain itself;
* a stdout line over ``max_line_bytes`` is refused without buffering it: the transport
  fails the connection with :class:`MessageTooLarge` and memory stays flat;
* stdout lines that are not JSON-RPC are logged, counted and skipped;
* shutdown follows the protocol: close stdin, wait, SIGTERM the group, SIGKILL it.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

# Variables of the host that a child may see. Nothing else leaks through: the child gets
# these (when set) plus what its configuration names.
ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "PATCHBAY_DATA_DIR",
)

STDERR_TAIL_LINES = 50
STDERR_LINE_CAP = 2000
CLOSE_GRACE = 2.0
TERM_GRACE = 2.0


class MessageTooLarge(Exception):
    """The server sent a line longer than the configured cap."""


class ServerExited(Exception):
    """The server process ended while the connection was open."""


def child_environment(configured: Mapping[str, str], source: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if source is None else source
    env = {key: source[key] for key in ENV_ALLOWLIST if key in source and not source[key].startswith("()")}
    env.update(configured)
    return env


@dataclass
class StdioDiagnostics:
    """What the transport saw of the child, for the Servers page and for errors."""

    stderr: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STDERR_TAIL_LINES))
    noise_lines: int = 0
    last_noise: str = ""
    pid: int | None = None
    returncode: int | None = None
    failure: BaseException | None = None
    exited: anyio.Event = field(default_factory=anyio.Event)

    def stderr_tail(self) -> list[str]:
        return list(self.stderr)


class _LineSplitter:
    """Split a byte stream into lines, refusing any line longer than `cap` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            piece = chunk[start:nl]
            if len(self.buf) + len(piece) > self.cap:
                raise MessageTooLarge(f"the server sent a message of more than {self.cap} bytes")
            if self.buf:
                self.buf += piece
                lines.append(bytes(self.buf))
                self.buf.clear()
            else:
                lines.append(piece)
            start = nl + 1
        rest = chunk[start:]
        if len(self.buf) + len(rest) > self.cap:
            raise MessageTooLarge(f"the server sent a message of more than {self.cap} bytes")
        self.buf += rest
        return lines


def parse_message(line: bytes) -> SessionMessage | None:
    """A JSON-RPC message, or None for anything else (noise)."""
    stripped = line.strip()
    if not stripped:
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(stripped, by_name=False)
    except ValueError:
        return None
    return SessionMessage(message)


@asynccontextmanager
async def hardened_stdio(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    max_line_bytes: int = 4 * 1024 * 1024,
    diagnostics: StdioDiagnostics | None = None,
    name: str = "",
    on_close: Callable[[], None] | None = None,
) -> AsyncIterator[
    tuple[anyio.abc.ObjectReceiveStream[SessionMessage | Exception], anyio.abc.ObjectSendStream[SessionMessage]]
]:
    """Start the server and yield the (read, write) stream pair `mcp.Client` takes."""
    diag = diagnostics if diagnostics is not None else StdioDiagnostics()
    process = await anyio.open_process(
        [command, *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    diag.pid = process.pid
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    label = name or command

    async def pump_stdout() -> None:
        assert process.stdout is not None
        splitter = _LineSplitter(max_line_bytes)
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    for line in splitter.feed(chunk):
                        message = parse_message(line)
                        if message is None:
                            if line.strip():
                                diag.noise_lines += 1
                                diag.last_noise = line[:200].decode("utf-8", "replace")
                                logger.warning("%s: skipped a stdout line that is not JSON-RPC: %.200r", label, line)
                            continue
                        await read_writer.send(message)
        except MessageTooLarge as exc:
            diag.failure = exc
            logger.error("%s: %s; closing the connection", label, exc)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            # Whatever ended the read (EOF, a refused line), the connection is over.
            with anyio.CancelScope(shield=True):
                await read_writer.aclose()
            if on_close is not None:
                on_close()

    async def pump_stderr() -> None:
        assert process.stderr is not None
        pending = bytearray()
        try:
            async for chunk in process.stderr:
                pending += chunk
                while True:
                    nl = pending.find(b"\n")
                    if nl < 0:
                        break
                    line = bytes(pending[:nl])
                    del pending[: nl + 1]
                    diag.stderr.append(line[:STDERR_LINE_CAP].decode("utf-8", "replace").rstrip("\r"))
                if len(pending) > STDERR_LINE_CAP:
                    # A huge line without newline: keep its head, drop the rest.
                    diag.stderr.append(bytes(pending[:STDERR_LINE_CAP]).decode("utf-8", "replace") + " …")
                    pending.clear()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass
        if pending:
            diag.stderr.append(bytes(pending[:STDERR_LINE_CAP]).decode("utf-8", "replace"))

    async def pump_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The child stopped reading (it died): end the session's reads too.
            with anyio.CancelScope(shield=True):
                await read_writer.aclose()

    async def watch_exit() -> None:
        code = await process.wait()
        diag.returncode = code
        diag.exited.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_stdout)
        tg.start_soon(pump_stderr)
        tg.start_soon(pump_stdin)
        tg.start_soon(watch_exit)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await stop_process(process, label)
                await write_stream.aclose()
                await read_stream.aclose()
            tg.cancel_scope.cancel()
    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
        await process.aclose()  # release the pipes and the subprocess transport


async def stop_process(process: anyio.abc.Process, label: str = "") -> None:
    """Close stdin, wait; SIGTERM the group, wait; SIGKILL the group."""
    if process.stdin is not None:
        try:
            await process.stdin.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
    if await _exited_within(process, CLOSE_GRACE):
        _kill_group(process.pid, signal.SIGKILL)  # helpers it left in its group
        return
    logger.info("%s: did not exit after stdin closed; sending SIGTERM", label)
    _kill_group(process.pid, signal.SIGTERM)
    if await _exited_within(process, TERM_GRACE):
        _kill_group(process.pid, signal.SIGKILL)
        return
    logger.warning("%s: did not exit after SIGTERM; sending SIGKILL", label)
    _kill_group(process.pid, signal.SIGKILL)
    await _exited_within(process, TERM_GRACE)


async def _exited_within(process: anyio.abc.Process, seconds: float) -> bool:
    deadline = anyio.current_time() + seconds
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.01)
    return True


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
