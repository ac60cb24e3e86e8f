"""The web server: daphne, with an access log that keeps secrets out of query strings.

``python -m hostapp.core.web [daphne's options] hostapp.asgi:application`` takes exactly
daphne's command line. Two things differ:

* the access log: query-string values whose names carry credentials (the OAuth callback's
  ``code`` and ``state``, tokens, secrets) are written as ``[redacted]``. Paths, other
  parameters, statuses and timings are logged as daphne logs them;
* under ``manage.py run``, a stuck stop writes every thread's stack first (SIGUSR2).
"""

from __future__ import annotations

import re
import sys
from typing import Any
from urllib.parse import unquote

from daphne import cli
from daphne.access import AccessLogGenerator
from daphne.server import Server

from hostapp.core.supervisor import dump_stacks_on

# Parameter names whose values are credentials (compared case-insensitively).
SECRET_PARAMS = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "assertion",
        "authorization",
        "client_assertion",
        "client_secret",
        "code",
        "code_verifier",
        "id_token",
        "jwt",
        "key",
        "password",
        "refresh_token",
        "secret",
        "sig",
        "signature",
        "state",
        "token",
        "x-amz-credential",
        "x-amz-security-token",
        "x-amz-signature",
    }
)
REDACTED = "[redacted]"
_PAIR = re.compile(r"([^&=;]*)(=?)([^&;]*)")


def redact_query(path: str) -> str:
    """The request path with the values of credential parameters replaced."""
    base, sep, query = path.partition("?")
    if not sep:
        return path

    def one(match: re.Match[str]) -> str:
        name, eq, value = match.group(1), match.group(2), match.group(3)
        if eq and value and unquote(name).lower() in SECRET_PARAMS:
            return f"{name}={REDACTED}"
        return match.group(0)

    return f"{base}?{_PAIR.sub(one, query)}"


class RedactingAccessLog(AccessLogGenerator):
    """daphne's access log, with credential parameters redacted from every logged path."""

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        path = details.get("path")
        if isinstance(path, str) and "?" in path:
            details = {**details, "path": redact_query(path)}
        super().__call__(protocol, action, details)


class RedactingServer(Server):
    """daphne's server, given the access log that redacts (daphne's command line makes its
    server through `server_class`, the hook it has for a server of one's own)."""

    def __init__(self, *args: Any, action_logger: Any = None, **kwargs: Any) -> None:
        if isinstance(action_logger, AccessLogGenerator) and not isinstance(action_logger, RedactingAccessLog):
            action_logger = RedactingAccessLog(action_logger.stream)
        super().__init__(*args, action_logger=action_logger, **kwargs)


class CommandLine(cli.CommandLineInterface):
    server_class = RedactingServer


def main(argv: list[str] | None = None) -> None:
    dump_stacks_on()  # under `manage.py run`: shown before a stuck stop is killed
    CommandLine().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
