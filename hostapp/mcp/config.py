"""Server configuration as plain data, read from the `mcpServers` JSON clients use.

The format is the one Claude Desktop, Cursor and VS Code share: a stdio server has
``command``, ``args``, ``env`` and ``cwd``; an HTTP server has ``url`` and ``headers``
(VS Code's ``type`` of ``"http"`` or ``"sse"`` picks the transport, and a URL ending in
``/sse`` means the deprecated HTTP+SSE transport). ``trusted``, ``enabled`` and ``oauth``
(a pre-registered OAuth client: ``clientId``, ``clientSecret``, ``scope``) are Patchbay's
own extras.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

Transport = Literal["stdio", "http", "sse"]

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

KNOWN_KEYS = {"command", "args", "env", "cwd", "url", "headers", "type", "transport", "trusted", "enabled", "oauth"}
OAUTH_KEYS = {"clientId", "clientSecret", "scope"}


class ConfigError(ValueError):
    """A configuration entry is wrong; names the entry and the field."""

    def __init__(self, entry: str, field_name: str, message: str) -> None:
        self.entry = entry
        self.field = field_name
        self.message = message
        super().__init__(f"server {entry!r}, field {field_name!r}: {message}")


@dataclass(frozen=True)
class ServerConfig:
    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    trusted: bool = False
    enabled: bool = True
    # A pre-registered OAuth client for an HTTP server (otherwise the host registers itself).
    oauth_client_id: str = ""
    oauth_client_secret: str = ""
    oauth_scope: str = ""
    # Changes when a person connects or disconnects the server's OAuth: a running
    # connection is then restarted with the new credentials.
    auth_stamp: str = ""
    # Host limits, not part of the mcpServers format.
    call_timeout: float = 60.0
    connect_timeout: float = 30.0
    max_message_bytes: int = 4 * 1024 * 1024

    def fingerprint(self) -> tuple[Any, ...]:
        """What decides whether a running connection still matches this configuration."""
        return (
            self.transport,
            self.command,
            self.args,
            tuple(sorted(self.env.items())),
            self.cwd,
            self.url,
            tuple(sorted(self.headers.items())),
            self.max_message_bytes,
            self.oauth_client_id,
            self.oauth_client_secret,
            self.oauth_scope,
            self.auth_stamp,
        )

    def to_entry(self) -> dict[str, Any]:
        """The `mcpServers` entry for this server (inverse of :func:`parse_entry`)."""
        entry: dict[str, Any] = {}
        if self.transport == "stdio":
            entry["command"] = self.command
            if self.args:
                entry["args"] = list(self.args)
            if self.env:
                entry["env"] = dict(self.env)
            if self.cwd:
                entry["cwd"] = self.cwd
        else:
            if self.transport == "sse" and not _looks_like_sse(self.url):
                entry["type"] = "sse"
            entry["url"] = self.url
            if self.headers:
                entry["headers"] = dict(self.headers)
        # Our extras only when they differ from the defaults, so a plain client file
        # round-trips unchanged.
        if self.trusted:
            entry["trusted"] = True
        if not self.enabled:
            entry["enabled"] = False
        if self.oauth_client_id or self.oauth_scope:
            oauth = {"clientId": self.oauth_client_id} if self.oauth_client_id else {}
            if self.oauth_client_secret:
                oauth["clientSecret"] = self.oauth_client_secret
            if self.oauth_scope:
                oauth["scope"] = self.oauth_scope
            entry["oauth"] = oauth
        return entry


def _looks_like_sse(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/sse")


# Names the host keeps for its own tools (`patchbay__call_status` on the agents' endpoint).
RESERVED_NAMES = frozenset({"patchbay"})


def validate_name(name: Any) -> str:
    if name in RESERVED_NAMES:
        raise ConfigError(str(name), "name", "is reserved for the host's own tools")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(
            str(name),
            "name",
            "must be a slug: 1-32 lowercase letters, digits and inner hyphens (like 'mailbox' or 'git-hub')",
        )
    return name


def _str_map(entry: str, field_name: str, value: Any, key_re: re.Pattern[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(entry, field_name, "must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key_re.match(key):
            raise ConfigError(entry, field_name, f"{key!r} is not a valid name")
        if not isinstance(item, str):
            raise ConfigError(entry, field_name, f"{key!r} must be a string, not {type(item).__name__}")
        if "\x00" in item or "\n" in item or "\r" in item:
            raise ConfigError(entry, field_name, f"{key!r} contains a control character")
        out[key] = item
    return out


def _bool(entry: str, field_name: str, value: Any, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(entry, field_name, "must be true or false")
    return value


def parse_entry(name: str, raw: Any, **limits: Any) -> ServerConfig:
    """Validate one `mcpServers` entry; raise :class:`ConfigError` naming the field."""
    validate_name(name)
    if not isinstance(raw, dict):
        raise ConfigError(name, "(entry)", "must be an object")
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(name, unknown[0], "is not a known field (expected command/args/env/cwd or url/headers)")
    trusted = _bool(name, "trusted", raw.get("trusted"), False)
    enabled = _bool(name, "enabled", raw.get("enabled"), True)
    kind = raw.get("type", raw.get("transport"))
    if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamableHttp", "sse"):
        raise ConfigError(name, "type", f"{kind!r} is not one of stdio, http, sse")
    has_command = "command" in raw
    has_url = "url" in raw
    if has_command and has_url:
        wrong = "command" if kind in ("http", "streamable-http", "streamableHttp", "sse") else "url"
        raise ConfigError(name, wrong, "a server has either a command (stdio) or a url (HTTP), not both")
    if not has_command and not has_url:
        raise ConfigError(name, "command", "is required (or give a url for an HTTP server)")
    if has_command:
        if kind not in (None, "stdio"):
            raise ConfigError(name, "type", f"{kind!r} does not go with a command")
        command = raw["command"]
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(name, "command", "must be a non-empty string")
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(name, "args", "must be a list of strings")
        if any("\x00" in a for a in args) or "\x00" in command:
            raise ConfigError(name, "args", "contains a NUL byte")
        cwd = raw.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise ConfigError(name, "cwd", "must be a non-empty string")
        if "headers" in raw:
            raise ConfigError(name, "headers", "only HTTP servers take headers")
        if "oauth" in raw:
            raise ConfigError(name, "oauth", "only HTTP servers take OAuth settings")
        return ServerConfig(
            name=name,
            transport="stdio",
            command=command,
            args=tuple(args),
            env=_str_map(name, "env", raw.get("env"), _ENV_NAME_RE),
            cwd=cwd,
            trusted=trusted,
            enabled=enabled,
            **limits,
        )
    url = raw["url"]
    if not isinstance(url, str):
        raise ConfigError(name, "url", "must be a string")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(name, "url", "must be an http:// or https:// URL")
    for key in ("args", "env", "cwd"):
        if key in raw:
            raise ConfigError(name, key, "only stdio servers take it")
    transport: Transport = "sse" if kind == "sse" or (kind is None and _looks_like_sse(url)) else "http"
    oauth = _oauth(name, raw.get("oauth"))
    return ServerConfig(
        name=name,
        transport=transport,
        url=url,
        headers=_str_map(name, "headers", raw.get("headers"), _HEADER_NAME_RE),
        trusted=trusted,
        enabled=enabled,
        oauth_client_id=oauth.get("clientId", ""),
        oauth_client_secret=oauth.get("clientSecret", ""),
        oauth_scope=oauth.get("scope", ""),
        **limits,
    )


def _oauth(entry: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(entry, "oauth", "must be an object with clientId, clientSecret and scope")
    unknown = sorted(set(value) - OAUTH_KEYS)
    if unknown:
        raise ConfigError(entry, f"oauth.{unknown[0]}", "is not a known field (expected clientId, clientSecret, scope)")
    for key, item in value.items():
        if not isinstance(item, str) or any(c in item for c in "\x00\r\n"):
            raise ConfigError(entry, f"oauth.{key}", "must be a single-line string")
    if value.get("clientSecret") and not value.get("clientId"):
        raise ConfigError(entry, "oauth.clientId", "is required with a clientSecret")
    return dict(value)


def parse_document(doc: Any) -> list[ServerConfig]:
    """Validate a whole `{"mcpServers": {...}}` document (VS Code's `"servers"` too)."""
    if not isinstance(doc, dict):
        raise ConfigError("(file)", "(root)", "must be a JSON object")
    servers = doc.get("mcpServers", doc.get("servers"))
    if not isinstance(servers, dict):
        raise ConfigError("(file)", "mcpServers", "must be an object mapping server names to entries")
    return [parse_entry(name, entry) for name, entry in servers.items()]


def render_document(configs: list[ServerConfig]) -> dict[str, Any]:
    return {"mcpServers": {c.name: c.to_entry() for c in configs}}
