"""The client pool: one live, supervised connection per configured server, per process.

The pool runs its own event loop in a daemon thread, so that connections outlive any
request and any caller can use them: sync code (views, Celery tasks, commands) through
the blocking methods, async code on another loop (the agents' endpoint) through the
``a*`` methods, which hop onto the pool's loop and back.

Each server has a keeper task that connects lazily (on first use), watches the
connection, restarts it when it dies (at once the first time, then with exponential
backoff and full jitter), and opens a circuit when it keeps dying: the server is
"crash-looping" and calls fail fast until a cool-down has passed. The state it reports:

========== ==============================================================
idle        configured, not connected (connections are made lazily, and closed again
            after `idle_close` seconds without a request when the policy sets it)
connecting  starting the server / handshaking
ready       connected, the last probe or request went well
degraded    connected, but the last probe failed or was slow, recent requests
            were lost, or the last tool listing failed (until one succeeds)
failing     not connected; the last attempt failed; retrying with backoff
crash-looping failed too often in a short window; circuit open until a cool-down
disabled    turned off in the configuration
========== ==============================================================
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from . import errors
from .config import ServerConfig
from .connection import CallWatch, Connection, Rounds
from .errors import McpFailure

logger = logging.getLogger(__name__)

T = TypeVar("T")

IDLE = "idle"
CONNECTING = "connecting"
READY = "ready"
DEGRADED = "degraded"
FAILING = "failing"
CRASH_LOOPING = "crash-looping"
DISABLED = "disabled"
# An HTTP server behind OAuth with no usable credentials: waits for a person to connect it.
NEEDS_AUTHORIZATION = "needs-authorization"
STATES = (IDLE, CONNECTING, READY, DEGRADED, FAILING, CRASH_LOOPING, DISABLED, NEEDS_AUTHORIZATION)


@dataclass(frozen=True)
class PoolPolicy:
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    crash_window: float = 60.0
    crash_threshold: int = 5
    cooldown: float = 60.0
    probe_timeout: float = 10.0
    slow_probe: float = 2.0
    # Consecutive lost requests on a live connection that mark it degraded.
    lost_requests_degrade: int = 2
    # A server that needs authorization is tried again this often (a person may have
    # connected it from another process).
    authorization_retry: float = 300.0
    # A connection with no tool call or listing for this long is closed (the server stops,
    # for stdio) and made again on the next use; None keeps connections open. Probes do
    # not count as use.
    idle_close: float | None = None


@dataclass(frozen=True)
class ServerStatus:
    """A snapshot of one server, as plain data."""

    name: str
    state: str
    transport: str
    enabled: bool
    protocol_version: str = ""
    era: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""
    last_error: dict[str, Any] | None = None
    stderr_tail: tuple[str, ...] = ()
    connected_since: float | None = None
    restarts: int = 0
    next_attempt_in: float | None = None
    last_probe_ms: float | None = None
    noise_lines: int = 0
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["stderr_tail"] = list(self.stderr_tail)
        return out


@dataclass(frozen=True)
class PoolEvent:
    kind: str  # "state" or "tools_changed"
    server: str
    status: ServerStatus


class _Slot:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = DISABLED if not config.enabled else IDLE
        self.connection: Connection | None = None
        self.keeper: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()  # set (and replaced) on every state change
        self.wake = asyncio.Event()  # config change, restart request, stop
        self.stopping = False
        self.restart_requested = False
        self.failures: collections.deque[float] = collections.deque()
        self.consecutive = 0
        self.restarts = 0
        self.last_error: McpFailure | None = None
        self.stderr_tail: tuple[str, ...] = ()
        self.connected_since: float | None = None
        self.next_attempt_at: float | None = None
        self.circuit_until: float | None = None
        self.last_probe_ms: float | None = None
        self.lost_in_a_row = 0
        # The last tool listing failed (a refused message, a timeout): the server is degraded,
        # whatever its connection does, until a listing succeeds.
        self.listing_failure: McpFailure | None = None
        # Requests on the connection now, and when the last one began or ended (idle_close).
        self.busy = 0
        self.last_used = time.monotonic()
        self.closed_idle = False
        # Resources the host is subscribed to, each with whom to tell of its updates; the
        # connection is kept (not closed idle) while there are any.
        self.subscriptions: dict[str, Callable[[str], None]] = {}
        self.subscriptions_changed = asyncio.Event()


class Pool:
    """Connections to many MCP servers, kept alive on one event loop.

    By default the pool runs a private loop in a daemon thread. An async host can give it
    its own running loop instead (`loop=`): calls made from that loop then skip the hop
    between threads (the cheapest way in), while threads still use the blocking methods.
    """

    def __init__(
        self,
        policy: PoolPolicy | None = None,
        listener: Callable[[PoolEvent], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        auth_factory: Callable[[ServerConfig], Any] | None = None,
    ) -> None:
        self.policy = policy or PoolPolicy()
        self.listener = listener
        # HTTP servers: an httpx2.Auth per connection (the host's OAuth), or None.
        self.auth_factory = auth_factory
        self._slots: dict[str, _Slot] = {}
        self._events = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-pool-events")
        self._closed = False
        self._thread: threading.Thread | None = None
        if loop is not None:
            self._loop = loop
        else:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._run_loop, name="mcp-pool", daemon=True)
            self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the loop thread ---------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise RuntimeError("the pool is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the pool's loop and wait for it from this (other) thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError("Pool.run called from the pool's own loop; await the coroutine instead")
        future = self._submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError("the pool did not answer in time") from None

    def spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a coroutine on the pool's loop without waiting for it (it outlives the caller's wait)."""
        return self._submit(coro)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine on the pool's loop from another event loop."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return await coro
        return await asyncio.wrap_future(self._submit(coro))

    def close(self, timeout: float = 15.0) -> None:
        """Stop every connection (protocol-order shutdown), then the private loop."""
        if self._closed:
            return
        try:
            self.run(self._close_all(), timeout=timeout)
        except (TimeoutError, RuntimeError):
            logger.warning("the pool did not close every connection within %.0fs", timeout)
        self._closed = True
        if self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()
        # Let the listener finish the events already handed to it (they are short).
        self._events.shutdown(wait=True)

    async def aclose(self) -> None:
        """Close from the pool's own loop (a pool given a host's loop)."""
        if self._closed:
            return
        await self._close_all()
        self._closed = True
        self._events.shutdown(wait=False)

    async def _close_all(self) -> None:
        await asyncio.gather(*(self._stop_slot(slot) for slot in list(self._slots.values())), return_exceptions=True)

    # -- configuration -------------------------------------------------------------------

    def configure(self, configs: Iterable[ServerConfig]) -> None:
        """Make the pool serve exactly these servers (restart the ones whose config changed)."""
        self.run(self._configure(list(configs)), timeout=30)

    async def aconfigure(self, configs: Iterable[ServerConfig]) -> None:
        await self.arun(self._configure(list(configs)))

    def upsert(self, config: ServerConfig) -> None:
        self.run(self._upsert(config), timeout=30)

    def remove(self, name: str) -> None:
        self.run(self._remove(name), timeout=30)

    async def _configure(self, configs: list[ServerConfig]) -> None:
        wanted = {c.name for c in configs}
        for name in [n for n in self._slots if n not in wanted]:
            await self._remove(name)
        for config in configs:
            await self._upsert(config)

    async def _upsert(self, config: ServerConfig) -> None:
        slot = self._slots.get(config.name)
        if slot is None:
            self._slots[config.name] = _Slot(config)
            self._emit(self._slots[config.name])
            return
        old = slot.config
        slot.config = config
        if old.fingerprint() != config.fingerprint() or old.enabled != config.enabled:
            await self._stop_slot(slot)
            fresh = _Slot(config)
            fresh.restarts = slot.restarts
            self._slots[config.name] = fresh
            self._emit(fresh)

    async def _remove(self, name: str) -> None:
        slot = self._slots.pop(name, None)
        if slot is not None:
            await self._stop_slot(slot)

    async def _stop_slot(self, slot: _Slot) -> None:
        slot.stopping = True
        slot.wake.set()
        if slot.keeper is not None:
            try:
                await asyncio.wait_for(asyncio.shield(slot.keeper), timeout=15)
            except (TimeoutError, asyncio.CancelledError):
                slot.keeper.cancel()
            except Exception:  # boundary: a keeper that failed on its way out has nothing left to stop
                logger.exception("keeper of %s failed while stopping", slot.config.name)

    def names(self) -> list[str]:
        return sorted(self._slots)

    # -- status ------------------------------------------------------------------------

    def status(self, name: str) -> ServerStatus:
        return self._snapshot(self._slot(name))

    def statuses(self) -> list[ServerStatus]:
        return [self._snapshot(self._slots[n]) for n in sorted(self._slots)]

    def _slot(self, name: str) -> _Slot:
        slot = self._slots.get(name)
        if slot is None:
            raise errors.transport_error(
                f"no server named {name!r} is configured", transient=False, reason="unknown_server"
            )
        return slot

    def _snapshot(self, slot: _Slot) -> ServerStatus:
        conn = slot.connection
        facts = conn.facts if conn is not None else None
        diag = conn.diagnostics if conn is not None else None
        now = time.monotonic()
        wake_at = slot.circuit_until if slot.state == CRASH_LOOPING else slot.next_attempt_at
        return ServerStatus(
            name=slot.config.name,
            state=slot.state,
            transport=slot.config.transport,
            enabled=slot.config.enabled,
            protocol_version=facts.protocol_version if facts else "",
            era=facts.era if facts else "",
            server_info=dict(facts.server_info) if facts else {},
            capabilities=dict(facts.capabilities) if facts else {},
            instructions=facts.instructions if facts else "",
            last_error=(slot.last_error or slot.listing_failure).as_dict()  # type: ignore[union-attr]
            if slot.last_error or slot.listing_failure
            else None,
            stderr_tail=tuple(diag.stderr) if diag is not None and diag.stderr else slot.stderr_tail,
            connected_since=slot.connected_since,
            restarts=slot.restarts,
            next_attempt_in=max(0.0, wake_at - now)
            if wake_at is not None and slot.state in (FAILING, CRASH_LOOPING, NEEDS_AUTHORIZATION)
            else None,
            last_probe_ms=slot.last_probe_ms,
            noise_lines=diag.noise_lines if diag is not None else 0,
            pid=diag.pid if diag is not None and slot.config.transport == "stdio" else None,
        )

    def _emit(self, slot: _Slot, kind: str = "state") -> None:
        if self.listener is None or self._closed:
            return
        event = PoolEvent(kind, slot.config.name, self._snapshot(slot))
        try:
            self._events.submit(self._deliver, event)
        except RuntimeError:  # executor shut down during close
            pass

    def _deliver(self, event: PoolEvent) -> None:
        assert self.listener is not None
        try:
            self.listener(event)
        except Exception:  # boundary: a listener's bug must not stop the pool
            logger.exception("pool listener failed on %s for %s", event.kind, event.server)

    def _set_state(self, slot: _Slot, state: str) -> None:
        if slot.state != state:
            slot.state = state
            changed, slot.changed = slot.changed, asyncio.Event()
            changed.set()
            self._emit(slot)

    # -- the keeper ----------------------------------------------------------------------

    def _ensure_keeper(self, slot: _Slot) -> None:
        if slot.keeper is None and slot.config.enabled and not slot.stopping:
            slot.keeper = self._loop.create_task(self._keep(slot), name=f"mcp-keeper-{slot.config.name}")

    async def _wait_wake(self, slot: _Slot, seconds: float) -> None:
        slot.wake.clear()
        try:
            await asyncio.wait_for(slot.wake.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            pass

    async def _keep(self, slot: _Slot) -> None:
        policy = self.policy
        while not slot.stopping:
            now = time.monotonic()
            if slot.circuit_until is not None and now < slot.circuit_until:
                self._set_state(slot, CRASH_LOOPING)
                await self._wait_wake(slot, slot.circuit_until - now)
                if slot.stopping:
                    break
                if slot.restart_requested:
                    slot.circuit_until = None
                continue
            slot.restart_requested = False
            slot.next_attempt_at = None
            self._set_state(slot, CONNECTING)
            auth = self.auth_factory(slot.config) if self.auth_factory and slot.config.transport != "stdio" else None
            conn = Connection(
                slot.config,
                on_tools_changed=functools.partial(self._tools_changed, slot),
                on_resource_updated=functools.partial(self._resource_updated, slot),
                auth=auth,
            )
            failure: McpFailure | None = None
            try:
                async with AsyncExitStack() as stack:
                    await conn.open(stack)
                    slot.connection = conn
                    slot.connected_since = time.time()
                    slot.last_used = time.monotonic()  # a new connection is given its idle time
                    slot.consecutive = 0
                    slot.lost_in_a_row = 0
                    slot.last_error = None
                    slot.ready.set()
                    self._set_state(slot, self._healthy(slot))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(conn.listen_for_changes)
                        tg.start_soon(self._keep_subscriptions, slot, conn)
                        await self._wait_closed(slot, conn)
                        tg.cancel_scope.cancel()
                    slot.ready.clear()
            except McpFailure as exc:
                failure = exc
            except Exception as exc:  # boundary: whatever ended the connection is recorded, never raised
                logger.warning("%s: connection ended: %r", slot.config.name, exc)
                failure = conn.failure or errors.transport_error(f"connection failed: {exc!r}", reason="crashed")
            finally:
                slot.ready.clear()
                slot.connection = None
                slot.stderr_tail = tuple(conn.diagnostics.stderr)
            if failure is None:
                failure = conn.connect_timed_out()
            if slot.stopping:
                break
            if slot.closed_idle and failure is None:
                # Closed for want of use: idle until the next request starts a keeper again.
                slot.closed_idle = False
                slot.connected_since = None
                slot.keeper = None
                self._set_state(slot, IDLE)
                return
            slot.closed_idle = False
            if slot.restart_requested and failure is None:
                slot.restarts += 1
                continue
            # The connection failed or died: record why, then back off.
            if failure is None:
                failure = conn.failure or self._death(slot, conn)
            failure.server = slot.config.name
            if not failure.stderr_tail:
                failure.stderr_tail = list(slot.stderr_tail)
            slot.last_error = failure
            slot.connected_since = None
            if failure.reason == "needs_authorization":
                # Not a crash: nothing changes until someone connects it (a config change
                # wakes the keeper); an occasional retry notices a connection made elsewhere.
                slot.next_attempt_at = time.monotonic() + policy.authorization_retry
                self._set_state(slot, NEEDS_AUTHORIZATION)
                await self._wait_wake(slot, policy.authorization_retry)
                continue
            slot.restarts += 1
            slot.consecutive += 1
            now = time.monotonic()
            slot.failures.append(now)
            while slot.failures and slot.failures[0] < now - policy.crash_window:
                slot.failures.popleft()
            if len(slot.failures) >= policy.crash_threshold:
                logger.warning(
                    "%s: %d failures in %.0fs; circuit open for %.0fs",
                    slot.config.name,
                    len(slot.failures),
                    policy.crash_window,
                    policy.cooldown,
                )
                slot.circuit_until = now + policy.cooldown
                slot.failures.clear()
                continue
            if not failure.transient:
                delay = policy.backoff_cap
            elif slot.consecutive <= 1:
                delay = 0.0  # the first restart is immediate: the next call gets a fresh server
            else:
                delay = random.uniform(0, min(policy.backoff_cap, policy.backoff_base * 2 ** (slot.consecutive - 1)))
            slot.next_attempt_at = now + delay
            self._set_state(slot, FAILING)
            if delay > 0:
                await self._wait_wake(slot, delay)
        slot.state = DISABLED if not slot.config.enabled else IDLE
        slot.keeper = None

    def _death(self, slot: _Slot, conn: Connection) -> McpFailure:
        code = conn.diagnostics.returncode
        if code is not None:
            return errors.transport_error(f"the server exited (status {code})", reason="crashed")
        return errors.transport_error("the connection closed", reason="closed")

    async def _wait_closed(self, slot: _Slot, conn: Connection) -> None:
        idle_close = self.policy.idle_close
        while not slot.stopping and not slot.restart_requested and not conn.closed.is_set():
            timeout = None
            if idle_close is not None:
                idle_for = time.monotonic() - slot.last_used
                if slot.busy == 0 and not slot.subscriptions and idle_for >= idle_close:
                    # Unused for long enough: no new request may take this connection (the
                    # loop is ours until the next await), and the keeper lets it go.
                    slot.ready.clear()
                    slot.closed_idle = True
                    logger.info("%s: closing the connection, unused for %.0fs", slot.config.name, idle_for)
                    return
                timeout = max(0.05, idle_close - idle_for)
            slot.wake.clear()
            closed = asyncio.ensure_future(conn.closed.wait())
            woke = asyncio.ensure_future(slot.wake.wait())
            try:
                await asyncio.wait({closed, woke}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                woke.cancel()

    async def _tools_changed(self, slot: _Slot) -> None:
        self._emit(slot, "tools_changed")

    # -- resource subscriptions ------------------------------------------------------------

    async def _keep_subscriptions(self, slot: _Slot, conn: Connection) -> None:
        while True:
            slot.subscriptions_changed = changed = asyncio.Event()
            await conn.keep_subscribed(lambda: frozenset(slot.subscriptions), changed)

    async def _resource_updated(self, slot: _Slot, uri: str) -> None:
        tell = slot.subscriptions.get(uri)
        if tell is None:
            return
        try:
            tell(uri)
        except Exception:  # boundary: a subscriber's bug must not stop the connection
            logger.exception("%s: the subscriber of %s failed", slot.config.name, uri)

    async def _subscribe(self, name: str, uri: str, on_updated: Callable[[str], None] | None) -> None:
        slot = self._slot(name)
        if on_updated is None:
            if slot.subscriptions.pop(uri, None) is None:
                return
        else:
            slot.subscriptions[uri] = on_updated
        slot.subscriptions_changed.set()
        if slot.subscriptions:
            self._ensure_keeper(slot)

    async def asubscribe(self, server: str, uri: str, on_updated: Callable[[str], None]) -> None:
        """Be subscribed to `uri` of `server` (on every connection to it from now on):
        `on_updated(uri)`, on the pool's loop, at each update the server announces."""
        await self.arun(self._subscribe(server, uri, on_updated))

    async def aunsubscribe(self, server: str, uri: str) -> None:
        await self.arun(self._subscribe(server, uri, None))

    # -- using a connection ----------------------------------------------------------------

    async def _acquire(self, name: str, deadline: float) -> tuple[_Slot, Connection]:
        slot = self._slot(name)
        if not slot.config.enabled:
            raise errors.transport_error(f"{name} is disabled", transient=False, reason="disabled")
        while True:
            self._ensure_keeper(slot)  # again after each wait: a connection closed idle ends its keeper
            conn = slot.connection
            if conn is not None and slot.ready.is_set() and not conn.closed.is_set():
                return slot, conn
            now = time.monotonic()
            if slot.state == CRASH_LOOPING and slot.circuit_until is not None:
                what = "is crash-looping" if slot.config.transport == "stdio" else "cannot be reached"
                failure = errors.transport_error(
                    f"{name} {what}; retried in {max(0.0, slot.circuit_until - now):.0f}s"
                    + (f" (last error: {slot.last_error.message})" if slot.last_error else ""),
                    reason="circuit_open",
                    server=name,
                )
                failure.stderr_tail = list(slot.stderr_tail)
                raise failure
            if slot.state == NEEDS_AUTHORIZATION and slot.last_error is not None:
                raise dataclasses.replace(slot.last_error, server=name)
            permanent = slot.last_error is not None and not slot.last_error.transient
            if slot.state == FAILING and (
                permanent or (slot.next_attempt_at is not None and slot.next_attempt_at > deadline)
            ):
                last = slot.last_error or errors.transport_error(f"{name} is failing", reason="failing")
                wait = f" (next attempt in {slot.next_attempt_at - now:.1f}s)" if slot.next_attempt_at else ""
                raise dataclasses.replace(
                    last, message=last.message + wait, server=name, stderr_tail=list(slot.stderr_tail)
                )
            remaining = deadline - now
            if remaining <= 0:
                raise errors.transport_error(
                    f"{name} did not become ready in time"
                    + (f" (last error: {slot.last_error.message})" if slot.last_error else ""),
                    reason="not_ready",
                    server=name,
                )
            # Wait for the keeper to (re)connect, or for any other state change.
            try:
                await asyncio.wait_for(slot.changed.wait(), timeout=min(remaining, 1.0))
            except TimeoutError:
                pass

    def _listing_failed(self, slot: _Slot, failure: McpFailure) -> None:
        """The server answers, but its tools cannot be listed: degraded, with the reason, until
        a listing succeeds (a reconnect does not clear it)."""
        slot.listing_failure = dataclasses.replace(failure, server=slot.config.name)
        if slot.connection is not None and slot.state in (READY, DEGRADED):
            self._set_state(slot, DEGRADED)
        self._emit(slot)  # the reason, even when the state was degraded already

    def _healthy(self, slot: _Slot) -> str:
        """The state of a live connection that answers: ready, unless its listing fails."""
        return DEGRADED if slot.listing_failure is not None else READY

    def _note(self, slot: _Slot, failure: McpFailure | None) -> None:
        """Keep `degraded`/`ready` honest after each request on a live connection."""
        if failure is None or failure.kind in ("protocol", "tool"):
            slot.lost_in_a_row = 0
            if slot.state == DEGRADED and slot.connection is not None:
                self._set_state(slot, self._healthy(slot))
            return
        slot.lost_in_a_row += 1
        slot.last_error = failure
        if slot.connection is not None and slot.lost_in_a_row >= self.policy.lost_requests_degrade:
            self._set_state(slot, DEGRADED)
        if failure.reason == "message_too_large" and slot.connection is not None:
            # The stream cannot be trusted after a refused message: start over.
            slot.restart_requested = False
            slot.connection.closed.set()

    async def _call_tool(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any] | None,
        timeout: float | None,
        meta: dict[str, Any] | None,
        watch: CallWatch | None,
        rounds: Rounds | None = None,
    ) -> dict[str, Any]:
        slot = self._slot(name)
        limit = timeout if timeout is not None else slot.config.call_timeout
        deadline = time.monotonic() + slot.config.connect_timeout
        slot, conn = await self._acquire(name, deadline)
        self._begin_use(slot)  # no await since the connection was taken: idle_close cannot take it back
        try:
            result = await conn.call_tool(tool, arguments, timeout=limit, meta=meta, watch=watch, rounds=rounds)
        except McpFailure as failure:
            self._note(slot, failure)
            raise
        finally:
            self._end_use(slot)
        self._note(slot, None)
        return result

    async def _use(self, name: str, request: Callable[[Connection], Awaitable[Any]]) -> Any:
        """One request on `name`'s connection (reads of resources and prompts), on record as
        the server's latest outcome."""
        slot = self._slot(name)
        slot, conn = await self._acquire(name, time.monotonic() + slot.config.connect_timeout)
        self._begin_use(slot)
        try:
            result = await request(conn)
        except TimeoutError:
            failure = errors.ambiguous_error("no answer in time", reason="timeout", server=name)
            self._note(slot, failure)
            raise failure from None
        except McpFailure as failure:
            self._note(slot, failure)
            raise
        finally:
            self._end_use(slot)
        self._note(slot, None)
        return result

    async def _offered(self, name: str, timeout: float | None) -> dict[str, list[dict[str, Any]]]:
        async def listings(conn: Connection) -> dict[str, list[dict[str, Any]]]:
            # Side by side on the one connection: a refresh waits for one round trip, not three.
            resources, templates, prompts = await asyncio.gather(
                conn.list_resources(timeout), conn.list_resource_templates(timeout), conn.list_prompts(timeout)
            )
            return {"resources": resources, "resource_templates": templates, "prompts": prompts}

        return await self._use(name, listings)

    @staticmethod
    def _begin_use(slot: _Slot) -> None:
        slot.busy += 1
        slot.last_used = time.monotonic()

    @staticmethod
    def _end_use(slot: _Slot) -> None:
        slot.busy -= 1
        slot.last_used = time.monotonic()

    async def _list_tools(self, name: str, timeout: float | None) -> list[dict[str, Any]]:
        # A listing changes nothing upstream, so a connection lost under it (a restarted
        # server, an HTTP answer cut off midway; one closed before any answer is sent again
        # by the HTTP transport itself) costs one more try on a new connection rather than a
        # failed refresh, within the time one listing is given (what `list_tools` waits
        # for). Tool calls are never repeated here.
        slot = self._slot(name)
        budget = timeout or slot.config.call_timeout
        deadline = time.monotonic() + budget + slot.config.connect_timeout
        for attempt in (1, 2):
            slot, conn = await self._acquire(name, min(time.monotonic() + slot.config.connect_timeout, deadline))
            self._begin_use(slot)
            try:
                tools = await conn.list_tools(min(budget, max(0.1, deadline - time.monotonic())))
            except TimeoutError:
                failure = errors.ambiguous_error("the tool listing timed out", reason="timeout", server=name)
                self._note(slot, failure)
                self._listing_failed(slot, failure)
                raise failure from None
            except McpFailure as failure:
                self._note(slot, failure)
                if attempt == 1 and failure.reason == "lost" and deadline - time.monotonic() > 1.0:
                    logger.info("%s: the connection was lost under a tool listing; listing again", name)
                    # The keeper reconnects once the lost connection has wound down.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(conn.closed.wait(), timeout=1.0)
                    continue
                self._listing_failed(slot, failure)
                raise
            finally:
                self._end_use(slot)
            slot.listing_failure = None
            self._note(slot, None)
            return tools
        raise AssertionError("unreachable")

    async def _probe(self, name: str) -> ServerStatus:
        slot = self._slot(name)
        if not slot.config.enabled:
            return self._snapshot(slot)
        try:
            slot, conn = await self._acquire(name, time.monotonic() + slot.config.connect_timeout)
        except McpFailure:
            return self._snapshot(slot)
        try:
            took = await conn.probe(self.policy.probe_timeout)
        except (McpFailure, TimeoutError) as exc:
            failure = (
                exc
                if isinstance(exc, McpFailure)
                else errors.ambiguous_error(
                    f"no answer to the health probe within {self.policy.probe_timeout:g}s",
                    reason="timeout",
                    server=name,
                )
            )
            slot.last_error = failure
            if slot.connection is not None:
                self._set_state(slot, DEGRADED)
            return self._snapshot(slot)
        slot.last_probe_ms = round(took * 1000, 2)
        slot.lost_in_a_row = 0
        self._set_state(slot, DEGRADED if took > self.policy.slow_probe else self._healthy(slot))
        return self._snapshot(slot)

    async def _restart(self, name: str) -> None:
        slot = self._slot(name)
        slot.restart_requested = True
        slot.circuit_until = None
        slot.failures.clear()
        slot.consecutive = 0
        slot.wake.set()
        self._ensure_keeper(slot)

    # -- public API: blocking (for threads) and async (for other loops) ------------------------

    def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        meta: dict[str, Any] | None = None,
        watch: CallWatch | None = None,
    ) -> dict[str, Any]:
        """Call `tool` on `server`; the result as plain data, or raise :class:`McpFailure`."""
        slot = self._slot(server)
        limit = (timeout if timeout is not None else slot.config.call_timeout) + slot.config.connect_timeout + 5
        return self.run(self._call_tool(server, tool, arguments, timeout, meta, watch), timeout=limit)

    async def acall_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        meta: dict[str, Any] | None = None,
        watch: CallWatch | None = None,
        rounds: Rounds | None = None,
    ) -> dict[str, Any]:
        """:meth:`call_tool` for async callers; with `rounds`, a 2026-07-28 server's round of
        input requests comes back as it is (`Rounds`)."""
        return await self.arun(self._call_tool(server, tool, arguments, timeout, meta, watch, rounds))

    def list_tools(self, server: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        slot = self._slot(server)
        limit = (timeout or slot.config.call_timeout) + slot.config.connect_timeout + 5
        return self.run(self._list_tools(server, timeout), timeout=limit)

    async def alist_tools(self, server: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self.arun(self._list_tools(server, timeout))

    def list_offered(self, server: str, *, timeout: float | None = None) -> dict[str, list[dict[str, Any]]]:
        """The server's resources, resource templates and prompts (each [] where it offers none)."""
        slot = self._slot(server)
        limit = (timeout or slot.config.call_timeout) + slot.config.connect_timeout + 5
        return self.run(self._offered(server, timeout), timeout=limit)

    async def alist_offered(self, server: str, *, timeout: float | None = None) -> dict[str, list[dict[str, Any]]]:
        return await self.arun(self._offered(server, timeout))

    def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> dict[str, Any]:
        slot = self._slot(server)
        limit = (timeout or slot.config.call_timeout) + slot.config.connect_timeout + 5
        return self.run(self._use(server, lambda conn: conn.read_resource(uri, timeout)), timeout=limit)

    async def aread_resource(
        self, server: str, uri: str, *, timeout: float | None = None, rounds: Rounds | None = None
    ) -> dict[str, Any]:
        """:meth:`read_resource` for async callers; with `rounds`, as :meth:`acall_tool`."""
        return await self.arun(self._use(server, lambda conn: conn.read_resource(uri, timeout, rounds)))

    def get_prompt(
        self, server: str, name: str, arguments: dict[str, str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        slot = self._slot(server)
        limit = (timeout or slot.config.call_timeout) + slot.config.connect_timeout + 5
        return self.run(self._use(server, lambda conn: conn.get_prompt(name, arguments, timeout)), timeout=limit)

    async def aget_prompt(
        self,
        server: str,
        name: str,
        arguments: dict[str, str] | None = None,
        *,
        timeout: float | None = None,
        rounds: Rounds | None = None,
    ) -> dict[str, Any]:
        """:meth:`get_prompt` for async callers; with `rounds`, as :meth:`acall_tool`."""
        return await self.arun(self._use(server, lambda conn: conn.get_prompt(name, arguments, timeout, rounds)))

    async def acomplete(
        self,
        server: str,
        ref: dict[str, str],
        argument: dict[str, str],
        context_arguments: dict[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """`completion/complete` for a prompt's or a template's argument (Connection.complete)."""
        return await self.arun(self._use(server, lambda conn: conn.complete(ref, argument, context_arguments, timeout)))

    def probe(self, server: str) -> ServerStatus:
        slot = self._slot(server)
        return self.run(self._probe(server), timeout=slot.config.connect_timeout + self.policy.probe_timeout + 5)

    def restart(self, server: str) -> None:
        self.run(self._restart(server), timeout=10)

    async def aconnect(self, server: str, timeout: float | None = None) -> ServerStatus:
        slot = self._slot(server)
        try:
            await self.arun(self._acquire(server, time.monotonic() + (timeout or slot.config.connect_timeout)))
        except McpFailure:
            pass
        return self._snapshot(self._slot(server))

    def connect(self, server: str, timeout: float | None = None) -> ServerStatus:
        """Connect now (instead of lazily) and return the status once ready or failed."""
        slot = self._slot(server)

        async def go() -> ServerStatus:
            try:
                await self._acquire(server, time.monotonic() + (timeout or slot.config.connect_timeout))
            except McpFailure:
                pass
            return self._snapshot(self._slot(server))

        return self.run(go(), timeout=(timeout or slot.config.connect_timeout) + 5)
