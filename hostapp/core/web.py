"""The web server: daphne, with an access log that keeps secrets out of query strings.

``python -m hostapp.core.web [daphne's options] hostapp.asgi:application`` takes exactly
daphne's command line. Two things differ:

* the access log: query-string values whose names carry credentials (the OAuth callback's
  ``code`` and ``state``, tokens, secrets) are written as ``[redacted]``. Paths, other
  parameters, statuses and timings are logged as daphne logs them;
* Twisted, under daphne, reads every POST's ``Content-Type`` with the ``email`` package,
  only to tell form bodies from others (daphne hands the body to the app either way). That
  took about a tenth of the web process's time per call on the agents' endpoint, for
  the same few header values again and again, so the answers are remembered (a small
  bounded cache of a pure function: the same answer, computed once).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any
from urllib.parse import unquote

from daphne import cli
from daphne.access import AccessLogGenerator

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


CONTENT_TYPES_KEPT = 64


def remember_content_types() -> None:
    """Make Twisted's Content-Type parser remember its last answers (see the module's doc).

    The parser is a pure function of the header's bytes; a bounded LRU cache keeps a client
    that sends ever-new values from growing it. Safe to call more than once."""
    from twisted.web import http

    parse = getattr(http, "_parseContentType", None)
    if parse is None or hasattr(parse, "cache_info"):
        return  # another Twisted, or done already
    http._parseContentType = functools.lru_cache(maxsize=CONTENT_TYPES_KEPT)(parse)


def main(argv: list[str] | None = None) -> None:
    # daphne's command line builds its access log from this name; everything else is daphne's.
    cli.AccessLogGenerator = RedactingAccessLog  # type: ignore[misc]
    remember_content_types()
    dump_stacks_on()  # under `manage.py run`: shown before a stuck stop is killed
    cli.CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
