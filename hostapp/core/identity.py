"""What this process is (the web process, a worker, a command) and its name.

Set by the entry points before anything registers the process (hostapp/asgi.py,
hostapp/celery.py); it needs no Django, so the Celery app can set it as it starts.
"""

from __future__ import annotations

import os
import socket

WEB, WORKER, COMMAND = "web", "worker", "command"

_role = COMMAND


def set_role(role: str) -> None:
    global _role
    _role = role


def role() -> str:
    return _role


def name() -> str:
    """role@hostname:pid: a forked child is another process, with its own name."""
    return f"{_role}@{socket.gethostname()}:{os.getpid()}"
