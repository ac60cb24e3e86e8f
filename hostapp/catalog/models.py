from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from django.core.exceptions import ObjectDoesNotExist
from django.core.validators import RegexValidator
from django.db import models

from hostapp.core import processes
from hostapp.core.crypto import EncryptedJSONField, EncryptedTextField
from hostapp.core.jsonvalues import storable
from hostapp.core.models import Process
from hostapp.mcp.config import NAME_RE, ServerConfig

READ_ONLY = "read_only"
WRITE = "write"
DESTRUCTIVE = "destructive"
CLASS_CHOICES = [(READ_ONLY, "read-only"), (WRITE, "write"), (DESTRUCTIVE, "destructive")]

SECRET_MASK = "********"


def mask_secret(value: str) -> str:
    """Enough of a secret to recognise it, never enough to use it."""
    if len(value) <= 12:
        return "••••"
    return value[:3] + "…" + "•" * 4


# A server's secrets: encrypted at rest, never shown in a list of servers.
SECRET_FIELDS = ("env", "headers", "oauth_client_secret")


class ServerQuerySet(models.QuerySet["Server"]):
    def listed(self) -> list[Server]:
        """The servers as the lists show them (the Servers page, `mcp servers`, the API):
        read without their secrets, whose decryption is most of a row's cost, and each with
        `n_tools` and `n_quarantined`, counted in one grouped query of their tools. (Counted
        in the servers' own query, every server column goes through the grouping: on SQLite,
        3x the time of both queries together at 100 servers x 100 tools.)"""
        servers: list[Server] = list(self.defer(*SECRET_FIELDS).prefetch_related(live_states()))
        counts = {
            row["server_id"]: row
            for row in Tool.objects.filter(server__in=[s.pk for s in servers])
            .order_by()
            .values("server_id")
            .annotate(n=models.Count("pk"), quarantined=models.Count("pk", filter=models.Q(status=Tool.QUARANTINED)))
        }
        for server in servers:
            row: Mapping[str, Any] = counts.get(server.pk, {})
            server.n_tools, server.n_quarantined = row.get("n", 0), row.get("quarantined", 0)
        return servers


def live_states() -> models.Prefetch:
    """What live processes report of each server, read with the servers (`process_states`)."""
    return models.Prefetch("states", queryset=ServerState.objects.live(), to_attr="_live_states")


class Server(models.Model):
    STDIO, HTTP, SSE = "stdio", "http", "sse"
    TRANSPORTS = [(STDIO, "stdio"), (HTTP, "Streamable HTTP"), (SSE, "HTTP+SSE (deprecated)")]

    name = models.CharField(
        max_length=32,
        unique=True,
        validators=[RegexValidator(NAME_RE, "A slug: lowercase letters, digits and inner hyphens.")],
    )
    transport = models.CharField(max_length=8, choices=TRANSPORTS, default=STDIO)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = EncryptedJSONField(default=dict)  # secrets: encrypted at rest
    cwd = models.CharField(max_length=500, blank=True)
    url = models.URLField(max_length=500, blank=True)
    headers = EncryptedJSONField(default=dict)
    # A pre-registered OAuth client (else the host registers itself with the server).
    oauth_client_id = models.CharField("OAuth client id", max_length=500, blank=True)
    oauth_client_secret = EncryptedTextField("OAuth client secret", blank=True)
    oauth_scope = models.CharField(
        "OAuth scope", max_length=500, blank=True, help_text="Scopes to ask for, space-separated."
    )
    trusted = models.BooleanField(default=False, help_text="Believe its tool annotations.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    config_changed_at = models.DateTimeField(auto_now_add=True)

    # What the server said of itself at its last handshake (from whichever process it was).
    # The state of each process's connection to it is that process's (`ServerState`).
    protocol_version = models.CharField(max_length=20, blank=True)
    server_info = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True)

    # The catalog's view of the server.
    tools_refreshed_at = models.DateTimeField(null=True, blank=True)
    # When a refresh was last asked for, and when the last one ended (well or not): the
    # Servers page shows the progress of a "refresh all" from these.
    refresh_requested_at = models.DateTimeField(null=True, blank=True)
    last_refresh_at = models.DateTimeField(null=True, blank=True)
    stale = models.BooleanField(default=False, help_text="The last refresh failed; its tools are the last good ones.")
    refresh_error = models.TextField(blank=True)

    objects = ServerQuerySet.as_manager()

    # Counted for the servers `listed()` returns, on those only.
    n_tools: int
    n_quarantined: int

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def to_config(self) -> ServerConfig:
        return ServerConfig(
            name=self.name,
            transport=self.transport,  # type: ignore[arg-type]
            command=self.command,
            args=tuple(self.args or ()),
            env=dict(self.env or {}),
            cwd=self.cwd or None,
            url=self.url,
            headers=dict(self.headers or {}),
            trusted=self.trusted,
            enabled=self.enabled,
            oauth_client_id=self.oauth_client_id,
            oauth_client_secret=self.oauth_client_secret or "",
            oauth_scope=self.oauth_scope,
            auth_stamp=self.auth_stamp,
        )

    # -- the state: each live process's own, summed up by the worst ------------------------

    @property
    def process_states(self) -> list[ServerState]:
        """What each live process reports of this server, worst first (`listed()` and the
        server's page read them with the server)."""
        cached = getattr(self, "_live_states", None)
        if cached is None:
            cached = list(ServerState.objects.live().filter(server=self))
            for state in cached:
                state.server = self  # their word depends on the transport (`state_word`)
        return sorted(cached, key=lambda s: (SEVERITY.get(s.state, 0), s.process.name), reverse=True)

    @property
    def worst(self) -> ServerState | None:
        """The state of the process that fares worst with this server, if any holds one."""
        states = self.process_states
        return states[0] if states else None

    @property
    def state(self) -> str:
        """The summary: disabled, or the worst state a live process reports, or idle."""
        if not self.enabled:
            return "disabled"
        worst = self.worst
        return worst.state if worst is not None else "idle"

    @property
    def state_word(self) -> str:
        return state_word(self.state, self.transport)

    @property
    def state_at(self) -> Any:
        worst = self.worst
        return worst.state_at if worst is not None else None

    @property
    def last_error(self) -> dict[str, Any] | None:
        """The last error of the worst state's process (of any, if that one has none)."""
        for state in self.process_states:
            if state.last_error:
                return state.last_error
        return None

    @property
    def stderr_tail(self) -> list[str]:
        for state in self.process_states:
            if state.stderr_tail:
                return list(state.stderr_tail)
        return []

    @property
    def needs_authorization(self) -> bool:
        """The server refuses the host until a person connects it (OAuth)."""
        try:
            status = self.credential.status
        except ObjectDoesNotExist:
            status = None
        if status == "needs_authorization":
            return True
        # A connect since the pools' last reports outranks them; otherwise any pool's word.
        return status != "connected" and any(s.state == "needs-authorization" for s in self.process_states)

    @property
    def auth_stamp(self) -> str:
        try:
            return self.credential.stamp
        except ObjectDoesNotExist:
            return ""

    @property
    def masked_env(self) -> dict[str, str]:
        return {k: mask_secret(v) for k, v in (self.env or {}).items()}

    @property
    def masked_headers(self) -> dict[str, str]:
        return {k: mask_secret(v) for k, v in (self.headers or {}).items()}

    @property
    def refreshing(self) -> bool:
        return self.refresh_requested_at is not None and (
            self.last_refresh_at is None or self.last_refresh_at < self.refresh_requested_at
        )

    @property
    def target(self) -> str:
        """The command line or URL, as shown in pages (no secrets live here)."""
        if self.transport == self.STDIO:
            return " ".join([self.command, *(self.args or [])])
        return self.url


# How bad each state is, for the summary of a server over its processes (the worst wins).
# A process that has not connected yet (idle) says the least.
SEVERITY = {
    "idle": 0,
    "ready": 1,
    "connecting": 2,
    "degraded": 3,
    "needs-authorization": 4,
    "failing": 5,
    "crash-looping": 6,
    "disabled": 7,
}


# What pages call each state. A server over HTTP whose circuit opened did not crash: it
# could not be reached (or kept failing) often enough in a short window.
STATE_WORDS = {"needs-authorization": "needs authorization"}


def state_word(state: str, transport: str) -> str:
    if state == "crash-looping" and transport != Server.STDIO:
        return "unreachable"
    return STATE_WORDS.get(state, state)


class ServerStateQuerySet(models.QuerySet["ServerState"]):
    def live(self) -> ServerStateQuerySet:
        """Of processes seen lately (hostapp/core/processes.py), with their process."""
        return self.filter(process__seen_at__gte=processes.alive_since()).select_related("process")


class ServerState(models.Model):
    """What one process (web, a worker, a command) sees of one server: its connection's
    state, the last error and the server's stderr there (each process starts its own
    stdio servers). Written by that process only (hostapp/catalog/states.py), but for two
    resets: a change of the server's configuration forgets them all, and a person connecting
    the server ends every process's wait for that."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="states")
    process = models.ForeignKey(Process, on_delete=models.CASCADE, related_name="server_states")
    state = models.CharField(max_length=24)
    state_at = models.DateTimeField()
    last_error = models.JSONField(null=True, blank=True)
    stderr_tail = models.JSONField(default=list, blank=True)

    objects = ServerStateQuerySet.as_manager()

    class Meta:
        # One row per process and server; it serves the lookups by server too.
        constraints = [models.UniqueConstraint(fields=["server", "process"], name="one_state_per_process")]

    def __str__(self) -> str:
        return f"{self.server_id} in {self.process_id}: {self.state}"

    @property
    def word(self) -> str:
        return state_word(self.state, self.server.transport)


# What a tool's pin covers: everything that changes what calling it means.
PINNED_KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _pinned_text(definition: dict[str, Any]) -> str:
    """What a tool's pin hashes: its `PINNED_KEYS`, canonical JSON. A NaN raises ValueError."""
    return _canonical({key: definition.get(key) for key in PINNED_KEYS})


def definition_hash(definition: dict[str, Any]) -> str:
    """The pin of a tool: a hash of its `PINNED_KEYS`. The definition holds JSON values only
    (`storable`)."""
    return hashlib.sha256(_pinned_text(definition).encode()).hexdigest()


class StoredDefinition(NamedTuple):
    """A tool's definition as it is stored (`storable`), its hash (`definition_hash`) and,
    if asked for, its JSON text."""

    definition: dict[str, Any]
    digest: str
    text: str | None


_PINNED_IN_ORDER = tuple(sorted(PINNED_KEYS))
_string = json.encoder.encode_basestring  # a key, as `_canonical` writes it (ensure_ascii=False)


def _encoded(definition: dict[str, Any], with_text: bool) -> tuple[str, str | None]:
    """The pin's text (`_pinned_text`) and (`with_text`) the whole definition's JSON text,
    from one encoding of each value: the pin's keys are a part of the definition's, and the
    canonical encoding of an object is its keys in order, each with its value's canonical
    encoding (the definition's text keeps its own order of keys: a JSON column needs none).
    Raises ValueError for what `storable` changes (a NaN or an infinity, as `_pinned_text`
    does, and a NUL character), TypeError for a key that is not a string (no listing has
    one: JSON keys are strings) or a value that is not JSON."""
    pieces = {}
    for key, value in definition.items():
        if type(key) is not str:
            raise TypeError(f"a definition's key is not a string: {key!r}")
        piece = pieces[key] = _canonical(value)
        if "\\u0000" in piece or "\x00" in key:
            raise ValueError("a NUL character")
    pinned = "{" + ",".join(f'"{key}":{pieces.get(key, "null")}' for key in _PINNED_IN_ORDER) + "}"
    if not with_text:
        return pinned, None
    return pinned, "{" + ",".join(f"{_string(key)}:{piece}" for key, piece in pieces.items()) + "}"


def stored_definition(definition: dict[str, Any], *, with_text: bool = True) -> StoredDefinition:
    """The definition as it is stored, its hash and (`with_text`) its text (`StoredDefinition`).

    A clean definition (nearly all) is returned as it is, checked by the encoding its hash
    needs anyway; only one that holds something to change is copied."""
    try:
        pinned, text = _encoded(definition, with_text)
    except (ValueError, TypeError):  # something to clean; a key that is not a string
        clean = storable(definition)
        return StoredDefinition(clean, definition_hash(clean), json.dumps(clean) if with_text else None)
    return StoredDefinition(definition, hashlib.sha256(pinned.encode()).hexdigest(), text)


class Tool(models.Model):
    ACTIVE = "active"
    QUARANTINED = "quarantined"
    STATUSES = [(ACTIVE, "active"), (QUARANTINED, "quarantined")]
    CHANGED = "changed"
    NEW = "new"

    # Indexed by the unique (server, original_name), which serves lookups by server too, and
    # by the unique exposed name: no index of their own, none for pattern matching (which
    # `unique=True` adds on PostgreSQL). Every index is written with each row.
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="tools", db_index=False)
    original_name = models.CharField(max_length=512)
    exposed_name = models.CharField(max_length=64)
    name_warning = models.CharField(max_length=300, blank=True)

    # What the server says now (raw), and what a person accepted (the pin).
    definition = models.JSONField()
    definition_hash = models.CharField(max_length=64)
    pinned_definition = models.JSONField(null=True, blank=True)
    pinned_hash = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=12, choices=STATUSES, default=ACTIVE)
    quarantine_reason = models.CharField(max_length=12, blank=True)

    # Shown to people and agents: cleaned of controls, capped.
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    text_warning = models.CharField(max_length=200, blank=True)
    icons = models.JSONField(default=list, blank=True)

    class_override = models.CharField(max_length=12, choices=CLASS_CHOICES, blank=True)
    outbox_max_attempts = models.PositiveIntegerField(
        null=True, blank=True, help_text="Delivery attempts before a dead letter (default: the setting)."
    )
    effective_class = models.CharField(max_length=12, choices=CLASS_CHOICES, default=DESTRUCTIVE)

    # What agents are given instead of the exposed name and the server's description (an
    # admin's override, hostapp/catalog/actions.py `set_override`; blank: the server's). A
    # change by the server still quarantines the tool: the override is kept beside the pin.
    agent_name = models.CharField(max_length=64, blank=True)
    agent_description = models.TextField(blank=True)
    override_at = models.DateTimeField(null=True, blank=True)
    override_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    first_seen_at = models.DateTimeField(auto_now_add=True)
    changed_at = models.DateTimeField(auto_now_add=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["exposed_name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "original_name"], name="tool_unique_per_server"),
            models.UniqueConstraint(fields=["exposed_name"], name="tool_unique_exposed_name"),
            models.UniqueConstraint(
                fields=["agent_name"], condition=~models.Q(agent_name=""), name="tool_unique_agent_name"
            ),
        ]
        indexes = [
            # The catalog filters by status and class; search scans the rest.
            models.Index(fields=["status", "effective_class"], name="tool_status_class"),
        ]
        permissions = [("review_tool", "Can review and accept changed or new tools")]

    def __str__(self) -> str:
        return self.exposed_name

    @property
    def display_name(self) -> str:
        return self.title or self.original_name

    @property
    def name_for_agents(self) -> str:
        """The name agents call it by in a prefixed view: an admin's rename, else the exposed name."""
        return self.agent_name or self.exposed_name

    @property
    def overridden(self) -> bool:
        return bool(self.agent_name or self.agent_description)

    @property
    def annotations(self) -> dict[str, Any]:
        return dict(self.definition.get("annotations") or {})

    @property
    def input_schema(self) -> dict[str, Any]:
        return dict(self.definition.get("inputSchema") or {})

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.definition.get("outputSchema")

    @property
    def callable(self) -> bool:
        return self.status == self.ACTIVE


# --- what a server offers besides tools: prompts, resource templates, resources -----------------

# What a prompt's or a template's pin covers (the rest, `_meta` and icons, may change freely).
PROMPT_PINNED_KEYS = ("name", "title", "description", "arguments")
TEMPLATE_PINNED_KEYS = ("uriTemplate", "name", "title", "description", "mimeType", "annotations")


def offer_hash(definition: dict[str, Any], keys: tuple[str, ...]) -> str:
    """The pin of a prompt or a resource template: a hash of its pinned keys, canonical JSON."""
    return hashlib.sha256(_canonical({key: definition.get(key) for key in keys}).encode()).hexdigest()


class Offer(models.Model):
    """What prompts and resource templates share: pinned like tools, and quarantined when
    a server changes one (or when an untrusted server lists a new one) until reviewed."""

    ACTIVE, QUARANTINED = Tool.ACTIVE, Tool.QUARANTINED
    CHANGED, NEW = Tool.CHANGED, Tool.NEW

    definition = models.JSONField()
    definition_hash = models.CharField(max_length=64)
    pinned_definition = models.JSONField(null=True, blank=True)
    pinned_hash = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=12, choices=Tool.STATUSES, default=Tool.ACTIVE)
    quarantine_reason = models.CharField(max_length=12, blank=True)
    # Shown to people and agents: cleaned of controls, capped.
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    changed_at = models.DateTimeField(auto_now_add=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        abstract = True

    @property
    def display_name(self) -> str:
        return self.title or self.definition.get("name") or ""

    @property
    def callable(self) -> bool:
        return self.status == self.ACTIVE


class Prompt(Offer):
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="prompts", db_index=False)
    original_name = models.CharField(max_length=512)
    exposed_name = models.CharField(max_length=64)  # `<server>__<prompt>`, as tools are named

    class Meta:
        ordering = ["exposed_name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "original_name"], name="prompt_unique_per_server"),
            models.UniqueConstraint(fields=["exposed_name"], name="prompt_unique_exposed_name"),
        ]

    def __str__(self) -> str:
        return self.exposed_name

    @property
    def arguments(self) -> list[dict[str, Any]]:
        return [a for a in self.definition.get("arguments") or [] if isinstance(a, dict)]


class ResourceTemplate(Offer):
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="resource_templates", db_index=False)
    uri_template = models.CharField(max_length=2000)
    name = models.CharField(max_length=512, blank=True)
    mime_type = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["server__name", "uri_template"]
        constraints = [models.UniqueConstraint(fields=["server", "uri_template"], name="template_unique_per_server")]

    def __str__(self) -> str:
        return f"{self.server_id}:{self.uri_template}"


class Resource(models.Model):
    """A resource a server lists (read on demand: its contents are never stored)."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="resources", db_index=False)
    uri = models.CharField(max_length=2000)
    name = models.CharField(max_length=512, blank=True)
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    mime_type = models.CharField(max_length=200, blank=True)
    size = models.BigIntegerField(null=True, blank=True)
    definition = models.JSONField()
    listed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server__name", "uri"]
        constraints = [models.UniqueConstraint(fields=["server", "uri"], name="resource_unique_per_server")]

    def __str__(self) -> str:
        return self.uri

    @property
    def display_name(self) -> str:
        return self.title or self.name or self.uri
