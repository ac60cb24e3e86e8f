"""The web server's access log: credentials in query strings never reach it."""

from __future__ import annotations

import io

import pytest

from hostapp.core.web import RedactingAccessLog, redact_query


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
