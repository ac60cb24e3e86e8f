"""A small process supervisor for `manage.py run`: web, worker, beat (and Redis) as one group.

Each child runs in its own session so that a Ctrl-C in the terminal reaches only the
supervisor, which then stops the children in order: web, worker and beat first (SIGTERM,
then SIGKILL after a grace period), the embedded Redis last, so the worker can finish
its shutdown against it. The supervisor makes itself a child subreaper, so processes the
children leave behind (MCP servers started over stdio by the web process or the worker)
are re-parented to it and swept on the way out: no orphan survives. If the supervisor
itself is killed outright, every child gets SIGTERM from the kernel and stops as usual;
one still running after its grace is killed by its warden (see `lifeline.py`).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

logger = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36

# Started in front of every child (a script, run without importing the host): if the
# supervisor dies, the child gets SIGTERM from the kernel and, after its grace, SIGKILL.
LIFELINE = str(Path(__file__).with_name("lifeline.py"))


# How long a child stuck in its stop gets to write its threads' stacks before SIGKILL.
STACKS_WAIT = 1.0
# How often `watch` looks at its children (and at what the signal handlers noted).
TICK = 0.2
# The signal on which the host's own processes write their threads' stacks (SIGUSR1 is
# Celery's for the same purpose, in Python code; this one is answered by the interpreter
# itself, even while a thread holds the GIL).
STACKS_SIGNAL = signal.SIGUSR2


def dump_stacks_on(sig: int = STACKS_SIGNAL) -> None:
    """Write every thread's stack to stderr on `sig` (for a supervisor about to kill us).
    The process's own stderr: Celery replaces `sys.stderr` with a logger."""
    if sys.__stderr__ is not None:
        faulthandler.register(sig, file=sys.__stderr__, all_threads=True)


def become_subreaper() -> bool:
    """Ask Linux to re-parent our orphaned descendants to us instead of to init."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class ChildSpec:
    name: str
    argv: Sequence[str]
    # How long the child gets between SIGTERM and SIGKILL.
    grace: float = 10.0
    # Restarted when it exits while the group is running; a child that keeps failing
    # within `quick_exit` seconds of its start `max_quick_exits` times stops the group.
    restart: bool = True
    quick_exit: float = 10.0
    max_quick_exits: int = 5
    # A child that writes its threads' stacks on this signal (`dump_stacks_on`) is asked
    # to before it is killed for not stopping: the console then says what it was stuck on.
    stacks_signal: int | None = None


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_exits: int = 0
    next_start: float = 0.0
    pumps: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    """Starts children, restarts the ones that die, and stops all of them together."""

    def __init__(self, env: dict[str, str], out: IO[str] | None = None, colour: bool | None = None) -> None:
        self.env = env
        self.out = out or sys.stdout
        self.colour = self.out.isatty() if colour is None else colour
        self.children: list[_Child] = []
        self._stop = threading.Event()  # `request_stop`, from any thread
        # Set by the signal handlers (`install_signal_handlers`). Plain flags: a handler runs
        # in the main thread between two of its bytecodes, and taking a lock there (an Event's)
        # that the interrupted code holds would wait for ever.
        self._signalled = False
        self._orphan_ended = False
        self._out_lock = threading.Lock()
        self.exit_code = 0

    # -- output ---------------------------------------------------------------------

    def say(self, name: str, line: str) -> None:
        label = f"{name:>6} | "
        if self.colour:
            label = f"\033[2m{label}\033[0m"
        with self._out_lock:
            self.out.write(label + line.rstrip("\n") + "\n")
            self.out.flush()

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(name, raw.decode("utf-8", "replace"))
        stream.close()

    # -- lifecycle --------------------------------------------------------------------

    def start(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        if shutil.which(spec.argv[0]) is None:  # said at once, not as a child that keeps exiting
            raise FileNotFoundError(f"{spec.name}: no such program: {spec.argv[0]}")
        child = next((c for c in self.children if c.spec.name == spec.name), None)
        if child is None:
            child = _Child(spec)
            self.children.append(child)
        argv = list(spec.argv)
        if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
            argv = [sys.executable, "-S", LIFELINE, str(os.getpid()), str(spec.grace), *argv]
        proc = subprocess.Popen(
            argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child.proc = proc
        child.started_at = time.monotonic()
        assert proc.stdout is not None
        pump = threading.Thread(target=self._pump, args=(spec.name, proc.stdout), daemon=True)
        pump.start()
        child.pumps.append(pump)
        return proc

    def install_signal_handlers(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self._signalled = True

        def orphan_ended(signum: int, frame: object) -> None:
            self._orphan_ended = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGHUP, stop)
        # A process below us ended: if it is an orphan (a child's warden, an MCP server a
        # crashed child left), `watch` reaps it; our own children are waited for as usual.
        signal.signal(signal.SIGCHLD, orphan_ended)

    def request_stop(self) -> None:
        self._stop.set()

    def _stopping(self) -> bool:
        return self._signalled or self._stop.is_set()

    def watch(self, on_tick: Callable[[], None] | None = None) -> None:
        """Restart children that exit until a stop is requested (a signal: within a tick)."""
        while not self._stopping():
            self._stop.wait(TICK)  # from another thread at once; a signal's flag at the next tick
            if self._stopping():
                break
            if self._orphan_ended:
                self._orphan_ended = False
                self._reap_orphans()
            now = time.monotonic()
            for child in self.children:
                proc = child.proc
                if proc is None or proc.poll() is None:
                    if proc is None and child.next_start and now >= child.next_start:
                        child.next_start = 0.0
                        self.say("run", f"restarting {child.spec.name}")
                        self.start(child.spec)
                    continue
                code = proc.returncode
                child.proc = None
                if not child.spec.restart:
                    self.say("run", f"{child.spec.name} exited with status {code}; stopping")
                    self.exit_code = 1
                    self._stop.set()
                    break
                lived = now - child.started_at
                child.quick_exits = child.quick_exits + 1 if lived < child.spec.quick_exit else 0
                if child.quick_exits >= child.spec.max_quick_exits:
                    self.say("run", f"{child.spec.name} keeps exiting (status {code}); stopping everything")
                    self.exit_code = 1
                    self._stop.set()
                    break
                delay = min(30.0, 0.5 * 2 ** max(0, child.quick_exits - 1))
                self.say("run", f"{child.spec.name} exited with status {code}; restarting in {delay:.1f}s")
                child.next_start = now + delay
            if on_tick is not None:
                on_tick()

    def _reap_orphans(self) -> None:
        """Collect the exit status of processes that ended after being re-parented to us
        (none of them a child we started), so that they do not stay as zombies."""
        ours = {c.proc.pid for c in self.children if c.proc is not None}
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process().children():
                if p.pid not in ours and p.status() == psutil.STATUS_ZOMBIE:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(p.pid, os.WNOHANG)

    def stop_child(self, child: _Child) -> None:
        proc = child.proc
        if proc is None:
            return
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=child.spec.grace)
        except subprocess.TimeoutExpired:
            self.say("run", f"{child.spec.name} did not stop within {child.spec.grace:.0f}s; killing it")
            if child.spec.stacks_signal is not None:
                self.say("run", f"what {child.spec.name}'s threads were doing:")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, child.spec.stacks_signal)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=STACKS_WAIT)
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        # The group may still hold helpers of the child (a prefork pool, say).
        _signal_group(proc.pid, signal.SIGKILL)
        child.proc = None

    def stop_all(self, last: Sequence[str] = ()) -> None:
        """Stop every child (those named in `last` after the others), then sweep orphans."""
        first = [c for c in self.children if c.spec.name not in last]
        later = [c for c in self.children if c.spec.name in last]
        threads = [threading.Thread(target=self.stop_child, args=(c,)) for c in first]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        keep = {c.proc.pid for c in later if c.proc is not None}
        sweep_descendants(exclude=keep)
        for c in later:
            self.stop_child(c)
        sweep_descendants()
        for c in self.children:
            for pump in c.pumps:
                pump.join(timeout=2)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def sweep_descendants(grace: float = 5.0, exclude: Collection[int] = ()) -> list[int]:
    """Terminate every process still below us (orphans re-parented to the subreaper).

    Processes in `exclude`, and everything below them, are left alone.
    """
    me = psutil.Process()
    try:
        left = me.children(recursive=True)
        spared = set(exclude)
        for pid in exclude:
            spared.update(p.pid for p in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []
    left = [p for p in left if p.pid not in spared]
    if not left:
        return []
    pids = [p.pid for p in left]
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(left, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return pids
