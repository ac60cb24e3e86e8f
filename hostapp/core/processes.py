"""This process as the database knows it: a `Process` row, refreshed while it lives.

A process that holds connections to MCP servers registers when it first stores what its
pool sees of a server (`catalog.ServerState`, keyed by this row). A thread refreshes the
row's `seen_at` every `BEAT` seconds; the row is deleted when the process closes its pool
(at a normal exit too), and with it what the process reported. A process killed outright leaves its row behind:
pages count it as gone once it has not been seen for `STALE` seconds, and the sweeper
deletes it after `FORGET` (`forget_gone`).

Entry points say what the process is (hostapp/core/identity.py): the web process, a
worker; anything else (a `manage.py mcp` command, a test) is a "command".
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from .identity import name, role
from .models import Process

logger = logging.getLogger(__name__)

BEAT = 15.0
STALE = timedelta(seconds=45)
FORGET = timedelta(minutes=10)

_lock = threading.Lock()
_thread: threading.Thread | None = None
_stop = threading.Event()
_unregister_at_exit = False
_registered = False


def register() -> Process:
    """This process's row, written (or refreshed) now; the heartbeat starts with the first.

    The first time in a process, a row of the same host and pid is another, older process's
    (a container restarted with its hostname and pid 1, say): it goes, with what it reported."""
    global _registered
    now = timezone.now()
    fields = {"role": role(), "hostname": socket.gethostname(), "pid": os.getpid(), "seen_at": now}
    with transaction.atomic():
        if not _registered:
            _mine().delete()
        process, _ = Process.objects.update_or_create(
            name=name(), defaults=fields, create_defaults={**fields, "started_at": now}
        )
    _registered = True
    _start_heartbeat()
    return process


def _mine() -> Any:
    """The rows of this process: of its host and pid, whatever role it had when it wrote
    them (an older process's with that pid is a dead one's)."""
    return Process.objects.filter(hostname=socket.gethostname(), pid=os.getpid())


def registered() -> bool:
    """Whether this process has its row (it stored what its pool saw, and has not closed it)."""
    return _registered


def _start_heartbeat() -> None:
    global _thread, _unregister_at_exit
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _stop.clear()
        _thread = threading.Thread(target=_beat, name="process-heartbeat", daemon=True)
        _thread.start()
        if not _unregister_at_exit:
            atexit.register(unregister)
            _unregister_at_exit = True


def _beat() -> None:
    while not _stop.wait(BEAT):
        try:
            if not Process.objects.filter(name=name()).update(seen_at=timezone.now()):
                register()  # forgotten meanwhile (a long pause): here again
        except Exception as exc:  # boundary (the thread's top): a missed beat only makes the process look gone
            logger.warning("this process's heartbeat was not written: %s", exc)
        finally:
            connection.close()  # this thread's own; a beat is rare


def unregister() -> None:
    """Stop the heartbeat and delete this process's row (what it reported goes with it)."""
    global _registered
    _stop.set()
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2)
    if not _registered:
        return
    _registered = False
    try:
        _mine().delete()
    except DatabaseError as exc:  # boundary: at exit (the database may be gone); the sweeper forgets it
        logger.debug("this process's row was not deleted at exit: %s", exc)


def _forget_after_fork() -> None:
    """A forked child is another process: it registers itself when it needs to."""
    global _thread, _lock, _stop, _registered
    _registered = False
    _thread = None
    _lock = threading.Lock()
    _stop = threading.Event()


os.register_at_fork(after_in_child=_forget_after_fork)


def alive_since() -> datetime:
    """A process seen since then counts as alive."""
    return timezone.now() - STALE


def forget_gone() -> int:
    """Delete the rows of processes not seen for `FORGET` (they died without a word)."""
    _, deleted = Process.objects.filter(seen_at__lt=timezone.now() - FORGET).delete()
    return deleted.get(Process._meta.label, 0)
