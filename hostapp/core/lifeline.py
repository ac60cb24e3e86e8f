"""Started in front of every child of `manage.py run`: ties the child's life to the supervisor's.

    python -S lifeline.py SUPERVISOR_PID GRACE PROGRAM [ARGS...]

Run as a script, with the standard library only (and without `site`, so it starts in a
few milliseconds): it is not imported by the host.

1. It asks Linux to send the child SIGTERM when the supervisor dies (PR_SET_PDEATHSIG,
   kept across exec), so a supervisor killed with SIGKILL, which can stop nothing itself,
   still gets every child to shut down as on a normal stop.
2. It forks a warden, then becomes the child (exec). The warden sleeps until the
   supervisor is gone, then gives the child the grace the supervisor would have given it;
   a child still running after that (a shutdown stuck on a lost connection, say) is
   killed, with every process below it, as the supervisor would have done. The warden
   dies with the child (its own PR_SET_PDEATHSIG), and a normal stop, a signal to the
   child's process group, takes it down with the child.

The SIGTERM follows the death of the thread that started the child; the supervisor starts
them all from its main thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def _prctl_pdeathsig(libc: ctypes.CDLL, sig: int) -> None:
    libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def descendants(root: int) -> list[int]:
    """Every process below `root`, found by walking /proc (its children's children too)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        parent_of[int(entry)] = int(fields[1])
    below: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        kids = [child for child, parent in parent_of.items() if parent == pid]
        below.extend(kids)
        frontier.extend(kids)
    return below


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pid: int, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _warden(libc: ctypes.CDLL, supervisor: int, watch: int | None, child: int, grace: float) -> None:
    """The forked warden's whole life; it never returns."""
    try:
        _prctl_pdeathsig(libc, signal.SIGKILL)  # the child is our parent: we end with it
        if os.getppid() != child:
            os._exit(0)
        # Hold no end of the child's pipes: the supervisor reads its output until EOF.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        # A normal stop signals the whole group; the supervisor then does the waiting.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if watch is not None:
            select.select([watch], [], [])
        else:  # a kernel without pidfds (before 5.3): ask every half second
            while _alive(supervisor):
                time.sleep(0.5)
        # The supervisor is gone and the kernel has sent the child SIGTERM: its grace starts.
        time.sleep(grace)
        for pid in descendants(child):
            if pid != os.getpid():
                _kill(pid)
        _kill(child, group=True)  # the child's own group, this warden with it
    finally:
        os._exit(0)


def main(argv: list[str]) -> None:
    supervisor, grace, program = int(argv[1]), float(argv[2]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl_pdeathsig(libc, signal.SIGTERM)
    if os.getppid() != supervisor:
        sys.exit("the supervisor is gone")
    # Opened while the supervisor is certainly our parent, so the pid is not yet anyone
    # else's; closed on exec (pidfds are), so the program does not hold it.
    try:
        watch: int | None = os.pidfd_open(supervisor)
    except ProcessLookupError:
        sys.exit("the supervisor is gone")
    except OSError:
        watch = None
    child = os.getpid()
    if os.fork() == 0:
        _warden(libc, supervisor, watch, child, grace)
    os.execvp(program[0], program)


if __name__ == "__main__":
    main(sys.argv)
