"""The lifeline in front of each child of `manage.py run`: a child outlives a killed
supervisor by its grace at most, helpers included, and leaves nothing behind otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from hostapp.core.lifeline import descendants
from tests.helpers import REPO, clean_env, process_gone, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A child that ignores SIGTERM (a shutdown that never ends) and starts a helper in a
# session of its own that ignores it too (an MCP server over stdio, say).
STUBBORN = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
        start_new_session=True,
    )
    open(sys.argv[1], "w").write(str(helper.pid))
    time.sleep(600)
    """
)

# A child that stops at once on SIGTERM.
WILLING = "import sys, time; open(sys.argv[1], 'w').write('0'); time.sleep(600)"


def _start_supervisor(tmp_path: Path, child: str, grace: float, *, restart: bool = False) -> subprocess.Popen[str]:
    """A supervisor (in a process of its own, started from its main thread, as `manage.py
    run` does) with one child; it writes the pids it knows of to `pids.json`."""
    script = textwrap.dedent(
        f"""
        import json, os, sys, time
        from hostapp.core.supervisor import ChildSpec, Supervisor, become_subreaper
        assert become_subreaper()
        sup = Supervisor(env=dict(os.environ), out=open(os.devnull, "w"))
        argv = [sys.executable, "-c", {child!r}, {str(tmp_path / "helper")!r}]
        first = sup.start(ChildSpec("child", argv, grace={grace}, restart={restart})).pid
        while not os.path.exists({str(tmp_path / "helper")!r}):
            time.sleep(0.02)
        time.sleep(0.1)
        helper = int(open({str(tmp_path / "helper")!r}).read())
        json.dump({{"child": first, "helper": helper}}, open({str(tmp_path / "pids.tmp")!r}, "w"))
        os.rename({str(tmp_path / "pids.tmp")!r}, {str(tmp_path / "pids.json")!r})
        sup.install_signal_handlers()
        sup.watch()
        sup.stop_all()
        """
    )
    return subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=clean_env(), text=True)


def _pids(tmp_path: Path) -> dict[str, int]:
    path = tmp_path / "pids.json"
    wait_until(path.exists, timeout=30, what="the child's pids")
    return json.loads(path.read_text())


def _warden_of(child: int) -> int:
    kids = wait_until(lambda: psutil.Process(child).children(), timeout=10, what="the warden")
    return kids[0].pid


def _kill_all(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def test_a_child_stuck_in_its_shutdown_is_killed_after_its_grace_with_its_helpers(tmp_path: Path) -> None:
    grace = 2.0
    sup = _start_supervisor(tmp_path, STUBBORN, grace)
    pids = _pids(tmp_path)
    child, helper = pids["child"], pids["helper"]
    try:
        warden = _warden_of(child)
        sup.kill()
        sup.wait(timeout=10)
        killed_at = time.monotonic()
        wait_until(
            lambda: process_gone(child) and process_gone(helper) and process_gone(warden),
            timeout=grace + 20,
            what="all three gone",
        )
        # Not before its grace: the kernel's SIGTERM came first, and the child had its time.
        assert time.monotonic() - killed_at >= grace - 0.2
    finally:
        _kill_all(child, helper)


def test_a_child_that_stops_on_sigterm_takes_its_warden_with_it(tmp_path: Path) -> None:
    sup = _start_supervisor(tmp_path, WILLING, grace=60.0)
    child = _pids(tmp_path)["child"]
    try:
        warden = _warden_of(child)
        sup.kill()
        sup.wait(timeout=10)
        # Well within the grace: nothing waits for it once the child is gone.
        wait_until(
            lambda: process_gone(child) and process_gone(warden), timeout=15, what="the child and its warden gone"
        )
    finally:
        _kill_all(child)


def test_a_normal_stop_leaves_no_warden_and_no_zombie(tmp_path: Path) -> None:
    sup = _start_supervisor(tmp_path, WILLING, grace=5.0)
    child = _pids(tmp_path)["child"]
    warden = _warden_of(child)
    supervisor = psutil.Process(sup.pid)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=30) == 0
    assert process_gone(child) and process_gone(warden)
    assert not supervisor.is_running()


def test_a_restarted_child_leaves_no_zombie_warden_behind(tmp_path: Path) -> None:
    sup = _start_supervisor(tmp_path, WILLING, grace=5.0, restart=True)
    try:
        first = _pids(tmp_path)["child"]
        _warden_of(first)
        os.kill(first, signal.SIGKILL)  # it dies; the supervisor starts it again
        supervisor = psutil.Process(sup.pid)

        def settled() -> bool:
            kids = supervisor.children()
            zombies = [p for p in kids if p.status() == psutil.STATUS_ZOMBIE]
            return len(kids) == 1 and kids[0].pid != first and not zombies

        wait_until(settled, timeout=20, what="one new child and no zombie")
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=30)


def test_descendants_walks_the_whole_tree() -> None:
    tree = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
            "time.sleep(60)",
        ]
    )
    try:
        found = wait_until(lambda: descendants(os.getpid()) if len(descendants(tree.pid)) == 1 else None, timeout=15)
        assert tree.pid in found
        grandchild = descendants(tree.pid)[0]
        assert grandchild in found
        assert psutil.Process(grandchild).ppid() == tree.pid
    finally:
        for pid in descendants(tree.pid):
            _kill_all(pid)
        tree.kill()
        tree.wait()


def test_a_child_stuck_in_its_stop_shows_its_threads_before_it_is_killed(tmp_path: Path) -> None:
    import io

    from hostapp.core.supervisor import STACKS_SIGNAL, ChildSpec, Supervisor

    ready = tmp_path / "ready"
    stuck = textwrap.dedent(
        f"""
        import signal, time
        from hostapp.core.supervisor import dump_stacks_on
        dump_stacks_on()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

        def waiting_for_something_that_never_comes():
            open({str(ready)!r}, "w").close()
            time.sleep(600)

        waiting_for_something_that_never_comes()
        """
    )
    out = io.StringIO()
    sup = Supervisor(env=clean_env(PYTHONPATH=str(REPO)), out=out)
    sup.start(ChildSpec("stuck", [sys.executable, "-c", stuck], grace=1.0, stacks_signal=STACKS_SIGNAL))
    wait_until(ready.exists, timeout=30, what="the child to be ready")

    sup.stop_all()

    said = out.getvalue()
    assert "stuck did not stop within 1s; killing it" in said
    assert "what stuck's threads were doing:" in said
    assert "in waiting_for_something_that_never_comes" in said, said
