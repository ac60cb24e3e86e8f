"""The host under test, run as users run it: `manage.py run` in its own session.

Shared by the browser tests, the `manage.py run` tests and `python -m tests.browser.screenshot`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import httpx

from tests.helpers import PYTHON, REPO, clean_env, free_port, wait_until


def login(base_url: str, username: str, password: str, timeout: float = 10) -> httpx.Client:
    """An HTTP client of the host at `base_url`, logged in through its login page (session
    and CSRF cookies)."""
    client = httpx.Client(base_url=base_url, follow_redirects=True, timeout=timeout)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get("/login/").text)
    assert token, "no CSRF token on the login page"
    response = client.post(
        "/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": "/"},
        headers={"Referer": f"{base_url}/login/"},
    )
    assert "Log out" in response.text, response.text
    return client


class RunningHost:
    """`manage.py run --port N [ARGS]` on a fresh data dir: SQLite, embedded Redis, web + worker + beat."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.lines: list[str] = []
        # `env` may name a database and a Redis of its own (DATABASE_URL, REDIS_URL).
        overrides: dict[str, str | None] = {
            "PATCHBAY_DATA_DIR": str(data_dir),
            "DATABASE_URL": None,
            "REDIS_URL": None,
            "SECRET_KEY": None,
            "PATCHBAY_DEBUG": None,
            "DEBUG": None,
        }
        self.env = clean_env(**{**overrides, **(env or {})})
        self.proc = subprocess.Popen(
            [PYTHON, "manage.py", "run", "--port", str(self.port), *args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_password(self) -> str:
        found = re.search(r"password: (\S+)", self.output)
        assert found, f"no admin password in the output of run:\n{self.output}"
        return found.group(1)

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"run exited early:\n{self.output}"
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        wait_until(ready, timeout=120, what=f"the web process to answer\n{self.output}")

    def start_manage(self, *args: str) -> subprocess.Popen[str]:
        """`manage.py ...` against this host's database (same data dir, same embedded Redis)."""
        return subprocess.Popen(
            [PYTHON, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float = 90) -> str:
        """Wait for a `start_manage` process; its stdout, or an AssertionError with all it said."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, f"{' '.join(map(str, proc.args))} failed ({proc.returncode}):\n{out}{err}"
        return out

    def manage(self, *args: str) -> str:
        return self.finish(self.start_manage(*args))

    @staticmethod
    def create_users_command(*users: tuple[str, str, list[str]]) -> tuple[str, ...]:
        """The `manage.py shell` command that creates plain (non-staff) users with permissions,
        each `(username, password, ["app_label.codename", ...])`."""
        code = (
            "from django.contrib.auth.models import Permission, User\n"
            f"for name, password, perms in {[tuple(u) for u in users]!r}:\n"
            "    u = User.objects.create_user(name, password=password)\n"
            "    for p in perms:\n"
            "        app, code = p.split('.')\n"
            "        u.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=code))\n"
        )
        return ("shell", "-v", "0", "-c", code)

    def create_users(self, *users: tuple[str, str, list[str]]) -> None:
        self.manage(*self.create_users_command(*users))

    def http_client(self, username: str = "admin", password: str | None = None) -> httpx.Client:
        """An HTTP client logged in through the login page."""
        return login(self.url, username, self.admin_password if password is None else password)

    def wait_for_tools(self, *names: str, timeout: float = 90) -> None:
        """Until the Catalog lists these tools (the worker lists the servers after the first start)."""
        client = self.http_client()

        def listed() -> bool:
            text = client.get("/catalog/", params={"fragment": "1"}).text
            return all(f'data-tool="{name}"' in text for name in names)

        try:
            wait_until(listed, timeout=timeout, interval=0.2, what=f"the catalog to list {names}\n{self.output}")
        finally:
            client.close()

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM (or `sig`) to `manage.py run`: it stops its whole group; `stop()` waits for that."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def signal_and_wait(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send `sig` to `manage.py run` and wait for it to exit on its own; its exit status."""
        self.terminate(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the group (a test's cleanup)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        try:
            self.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        finally:
            self.kill_group()
            self._reader.join(timeout=5)
