"""The web server's access log: credentials in query strings never reach it."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hostapp.core.web import RedactingAccessLog, redact_query

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/catalog/", "/catalog/"),
        ("/catalog/?q=invoice&page=2", "/catalog/?q=invoice&page=2"),
        ("/oauth/callback/?code=abc&state=xyz", "/oauth/callback/?code=[redacted]&state=[redacted]"),
        (
            "/oauth/callback/?state=xyz&code=abc&iss=https%3A%2F%2Fas",
            "/oauth/callback/?state=[redacted]&code=[redacted]&iss=https%3A%2F%2Fas",
        ),
        (
            "/x?Access_Token=1&refresh_token=2&client_secret=3",
            "/x?Access_Token=[redacted]&refresh_token=[redacted]&client_secret=[redacted]",
        ),
        ("/x?%63ode=1", "/x?%63ode=[redacted]"),  # an encoded name is still the name
        ("/x?code=&state", "/x?code=&state"),  # nothing to hide
        ("/x?token=a;password=b", "/x?token=[redacted];password=[redacted]"),
        ("/x?codex=1&mycode=2", "/x?codex=1&mycode=2"),  # whole names only
    ],
)
def test_credential_values_are_redacted_from_logged_paths(path: str, logged: str) -> None:
    assert redact_query(path) == logged


def test_the_access_log_line_carries_the_redacted_path() -> None:
    stream = io.StringIO()
    log = RedactingAccessLog(stream)
    details = {
        "path": "/oauth/callback/?code=s3cret&state=abc",
        "status": 302,
        "method": "GET",
        "client": "127.0.0.1:5000",
        "time_taken": 0.01,
        "size": 0,
    }
    log("http", "complete", details)
    line = stream.getvalue()
    assert '"GET /oauth/callback/?code=[redacted]&state=[redacted]" 302' in line, line
    assert "s3cret" not in line
    assert details["path"] == "/oauth/callback/?code=s3cret&state=abc"  # the caller's dict is untouched


def test_a_post_through_the_web_server_is_answered(tmp_path: Path) -> None:
    """The wrapper's daphne serves JSON and form POSTs alike."""
    app = tmp_path / "echo_app.py"
    app.write_text(
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    body = b''\n"
        "    while True:\n"
        "        message = await receive()\n"
        "        body += message.get('body', b'')\n"
        "        if not message.get('more_body'):\n"
        "            break\n"
        "    ctype = dict(scope['headers']).get(b'content-type', b'')\n"
        "    await send({'type': 'http.response.start', 'status': 200, 'headers': [(b'content-type', b'text/plain')]})\n"
        "    await send({'type': 'http.response.body', 'body': ctype + b'|' + body})\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostapp.core.web", "-b", "127.0.0.1", "-p", str(port), "echo_app:app"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        answers = []
        for body, ctype in ((b'{"a": 1}', "application/json"), (b"x=1&y=2", "application/x-www-form-urlencoded")) * 2:
            while True:
                try:
                    request = urllib.request.Request(
                        f"http://127.0.0.1:{port}/", data=body, headers={"Content-Type": ctype}
                    )
                    with urllib.request.urlopen(request, timeout=5) as response:
                        answers.append(response.read())
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
        assert (
            answers
            == [
                b'application/json|{"a": 1}',
                b"application/x-www-form-urlencoded|x=1&y=2",
            ]
            * 2
        )
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_web_servers_own_access_log_redacts_credentials(tmp_path: Path) -> None:
    """`python -m hostapp.core.web --access-log FILE`: daphne's command line, its server given
    the redacting log (`RedactingServer`)."""
    app = tmp_path / "ok_app.py"
    app.write_text(
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n"
        "    await send({'type': 'http.response.body', 'body': b'ok'})\n"
    )
    log = tmp_path / "access.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hostapp.core.web",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "--access-log",
            str(log),
            "ok_app:app",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/cb?code=abc123&state=s1&page=2", timeout=5) as r:
                    assert r.read() == b"ok"
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        while "/cb?" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.1)
        written = log.read_text()
        assert "/cb?code=[redacted]" in written and "page=2" in written, written
        assert "abc123" not in written
    finally:
        proc.terminate()
        proc.wait(10)
