"""One error taxonomy for everything that talks to an MCP server.

Every failure the connection layer reports is a :class:`McpFailure` with a ``kind``:

``protocol``
    The server answered with a JSON-RPC error (invalid params, unknown method, ...), or
    reported an unknown tool in the ``isError`` form real SDK servers use. Permanent:
    sending the same request again gets the same answer.
``tool``
    The tool ran and reported failure (an ``isError`` result). Permanent.
``transport``
    The request never left: the server could not be started or reached, the circuit is
    open, the connection was already down. Usually transient (a retry may find the
    server back), permanent when only a change of configuration can help (command not
    found, 401/403/404 on connect).
``ambiguous``
    The request may have reached the server and then the answer was lost: a timeout, a
    crash or a dropped connection mid-call, an HTTP 5xx after the POST. The caller cannot
    know whether the effect happened. Transient for reads; the outbox retries a write only
    when the tool is idempotent or the server honours idempotency keys.

``transient`` says whether the same request may succeed later without anyone changing
anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["protocol", "tool", "transport", "ambiguous"]

# JSON-RPC codes (see MCP.md, "Errors").
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SDK_REQUEST_TIMEOUT = -32001
SDK_CONNECTION_CLOSED = -32000


@dataclass(eq=False)
class McpFailure(Exception):
    """A classified failure of a request to an MCP server."""

    kind: Kind
    message: str
    transient: bool
    server: str = ""
    code: int | None = None
    data: Any = None
    http_status: int | None = None
    stderr_tail: list[str] = field(default_factory=list)
    # A short machine-readable reason: "timeout", "crashed", "unknown_tool", "circuit_open"...
    reason: str = ""

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        where = f"{self.server}: " if self.server else ""
        return f"{where}{self.message}"

    @property
    def ambiguous(self) -> bool:
        return self.kind == "ambiguous"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ledgers, logs and pages."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "transient": self.transient,
        }
        if self.code is not None:
            out["code"] = self.code
        if self.http_status is not None:
            out["http_status"] = self.http_status
        if self.stderr_tail:
            out["stderr_tail"] = list(self.stderr_tail)
        return out


def protocol_error(
    message: str, *, code: int | None = None, data: Any = None, reason: str = "jsonrpc_error"
) -> McpFailure:
    return McpFailure("protocol", message, transient=False, code=code, data=data, reason=reason)


def tool_error(message: str) -> McpFailure:
    return McpFailure("tool", message, transient=False, reason="is_error")


def transport_error(message: str, *, transient: bool = True, reason: str = "unreachable", **kw: Any) -> McpFailure:
    return McpFailure("transport", message, transient=transient, reason=reason, **kw)


def ambiguous_error(message: str, *, reason: str = "lost", **kw: Any) -> McpFailure:
    return McpFailure("ambiguous", message, transient=True, reason=reason, **kw)


def is_transient_http_status(status: int) -> bool:
    """429 and 5xx pass; other 4xx need someone to change something."""
    return status == 429 or status == 408 or status >= 500
