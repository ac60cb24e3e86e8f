"""Every change to servers and tools: each function owns its transaction.

Views, tasks and commands parse input and call these; nothing else writes the catalog.
Live events leave only after commit.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.db import models, transaction
from django.utils import timezone

from hostapp.core.events import send_event_on_commit
from hostapp.mcp import McpFailure
from hostapp.mcp.config import ConfigError, ServerConfig, parse_document, render_document
from hostapp.mcp.sanitize import (
    _BIDI,
    _INVISIBLE,
    _LINE_SEPARATORS,
    DESCRIPTION_CAP,
    TITLE_CAP,
    clean_text,
    safe_icons,
)

from . import states, tool_rows
from .models import DESTRUCTIVE, READ_ONLY, SECRET_MASK, WRITE, Server, Tool
from .naming import check_rename, expose_names, own_names

logger = logging.getLogger(__name__)

# What the MCP spec says an absent hint means.
ANNOTATION_DEFAULTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}


# --- classes and annotations ---------------------------------------------------------


def claimed_class(annotations: dict[str, Any]) -> str:
    hints = {**ANNOTATION_DEFAULTS, **{k: v for k, v in annotations.items() if isinstance(v, bool)}}
    if hints["readOnlyHint"]:
        return READ_ONLY
    if hints["destructiveHint"]:
        return DESTRUCTIVE
    return WRITE


def effective_class(annotations: dict[str, Any], trusted: bool, override: str = "") -> str:
    """An admin's override; else the annotations of a trusted server; else destructive."""
    if override:
        return override
    if trusted:
        return claimed_class(annotations)
    return DESTRUCTIVE


def applied_annotations(tool: Tool) -> dict[str, Any]:
    """The annotations the host acts on (and tells agents), after trust and overrides."""
    claimed = {**ANNOTATION_DEFAULTS, **{k: v for k, v in tool.annotations.items() if isinstance(v, bool)}}
    if tool.server.trusted and not tool.class_override:
        return claimed
    cls = tool.effective_class
    applied = dict(ANNOTATION_DEFAULTS)
    applied["readOnlyHint"] = cls == READ_ONLY
    applied["destructiveHint"] = cls == DESTRUCTIVE
    # Idempotency is only believed from a trusted server.
    applied["idempotentHint"] = bool(claimed["idempotentHint"]) if tool.server.trusted else False
    return applied


def _display_fields(definition: dict[str, Any]) -> dict[str, Any]:
    title = definition.get("title") or (definition.get("annotations") or {}).get("title") or ""
    raw_description = definition.get("description") or ""
    description, dropped = _clean(raw_description, DESCRIPTION_CAP)
    title, dropped_in_title = _clean(title, TITLE_CAP)
    dropped += dropped_in_title
    return {
        "title": title,
        "description": description,
        "icons": safe_icons(definition.get("icons")),
        "text_warning": f"{dropped} invisible or control characters were removed" if dropped else "",
    }


# Characters `clean_text` drops or replaces although `str.isprintable()` accepts them.
_ALTERED_PRINTABLE = re.compile(
    "[" + "".join(re.escape(c) for c in sorted({*_BIDI, *_INVISIBLE, *_LINE_SEPARATORS}) if c.isprintable()) + "]"
)


def _unchanged_by_cleaning(text: str) -> bool:
    """Whether `clean_text` would keep every character of `text` (it may still strip and cap).

    `str.isprintable()` is false exactly for "Other" (Cc, Cf, Cs, Co, Cn) and separator
    characters but the space; line breaks and tabs are kept by the cleaning, and a few
    printable characters are dropped all the same (`_ALTERED_PRINTABLE`). Other separators
    (a no-break space) take the slow path: kept, but not worth a case here."""
    probe = text.replace("\n", " ").replace("\t", " ") if "\n" in text or "\t" in text else text
    return probe.isprintable() and not _ALTERED_PRINTABLE.search(text)


def _clean(value: Any, cap: int) -> tuple[str, int]:
    """`(clean_text(value, cap), removed_characters(value))`, without `clean_text`'s loop over
    every character when it would change none, and with one loop instead of two otherwise."""
    text = "" if value is None else str(value)
    if _unchanged_by_cleaning(text):
        cleaned, removed = text.strip(), 0
    else:
        cleaned = clean_text(text, cap=len(text) + 1)
        removed = max(0, len(text.strip()) - len(cleaned))
    if len(cleaned) > cap:
        cleaned = clean_text(cleaned, cap)  # cleaning again changes nothing; it caps
    return cleaned, removed


def _same_json(new: Any, stored: Any) -> bool:
    """Whether two JSON values are the same, types included: Python has 1 == 1.0 == True,
    a definition's hash does not. Key order is ignored (PostgreSQL's jsonb reorders keys)."""
    if new != stored:
        return False
    return _same_types(new, stored)


def _same_types(a: Any, b: Any) -> bool:
    """For two values already known to be equal: every value has the same type in both."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        for key, value in a.items():
            other = b[key]
            if type(value) is str:
                if type(other) is not str:
                    return False
            elif not _same_types(value, other):
                return False
    elif kind is list:
        for value, other in zip(a, b, strict=True):
            if not _same_types(value, other):
                return False
    return True


# --- servers -----------------------------------------------------------------------------


def _config_fields(config: ServerConfig) -> dict[str, Any]:
    return {
        "transport": config.transport,
        "command": config.command,
        "args": list(config.args),
        "env": dict(config.env),
        "cwd": config.cwd or "",
        "url": config.url,
        "headers": dict(config.headers),
        "trusted": config.trusted,
        "enabled": config.enabled,
        "oauth_client_id": config.oauth_client_id,
        "oauth_client_secret": config.oauth_client_secret,
        "oauth_scope": config.oauth_scope,
    }


def _keep_masked(name: str, field_name: str, new: dict[str, str], old: dict[str, str]) -> dict[str, str]:
    """A masked value in an imported file means "keep the secret we have"."""
    out = {}
    for key, value in new.items():
        if value == SECRET_MASK:
            if key not in old:
                raise ConfigError(name, field_name, f"{key!r} is masked but no value is stored for it")
            out[key] = old[key]
        else:
            out[key] = value
    return out


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def import_servers(document: Any) -> ImportResult:
    """Create or update the servers of an `mcpServers` document, all or nothing."""
    configs = parse_document(document)
    result = ImportResult()
    with transaction.atomic():
        existing = {s.name: s for s in Server.objects.select_for_update().filter(name__in=[c.name for c in configs])}
        for config in configs:
            fields = _config_fields(config)
            server = existing.get(config.name)
            fields["env"] = _keep_masked(config.name, "env", fields["env"], server.env if server else {})
            fields["headers"] = _keep_masked(
                config.name, "headers", fields["headers"], server.headers if server else {}
            )
            if fields["oauth_client_secret"] == SECRET_MASK:
                if server is None or not server.oauth_client_secret:
                    raise ConfigError(config.name, "oauth.clientSecret", "is masked but no value is stored for it")
                fields["oauth_client_secret"] = server.oauth_client_secret
            if server is None:
                Server.objects.create(name=config.name, **fields)
                result.created.append(config.name)
                continue
            if all(getattr(server, k) == v for k, v in fields.items()):
                result.unchanged.append(config.name)
                continue
            trust_changed = server.trusted != fields["trusted"]
            for key, value in fields.items():
                setattr(server, key, value)
            server.config_changed_at = timezone.now()
            server.save(update_fields=[*fields, "config_changed_at"])
            states.config_changed(server)
            if trust_changed:
                _reclassify(server)
            result.updated.append(config.name)
        send_event_on_commit("server.changed", {"names": result.created + result.updated})
    return result


def export_servers(include_secrets: bool = False) -> dict[str, Any]:
    """The `mcpServers` document; secrets are masked unless asked for."""
    configs = []
    for server in Server.objects.order_by("name"):
        config = server.to_config()
        if not include_secrets:
            config = ServerConfig(
                **{
                    **config.__dict__,
                    "env": {k: SECRET_MASK for k in config.env},
                    "headers": {k: SECRET_MASK for k in config.headers},
                    "oauth_client_secret": SECRET_MASK if config.oauth_client_secret else "",
                }
            )
        configs.append(config)
    return render_document(configs)


def save_server(server: Server, *, config_changed: bool, trust_changed: bool) -> None:
    """Persist an edited server (from a form); the pools pick the change up."""
    with transaction.atomic():
        if config_changed:
            server.config_changed_at = timezone.now()
        server.save()
        if config_changed:
            states.config_changed(server)
        if trust_changed:
            _reclassify(server)
        send_event_on_commit("server.changed", {"names": [server.name]})


def set_enabled(server: Server, enabled: bool) -> None:
    with transaction.atomic():
        server.enabled = enabled
        server.config_changed_at = timezone.now()
        server.save(update_fields=["enabled", "config_changed_at"])
        states.config_changed(server)
        send_event_on_commit("server.changed", {"names": [server.name]})


def delete_server(server: Server) -> None:
    with transaction.atomic():
        name = server.name
        server.delete()
        send_event_on_commit("server.changed", {"names": [name]})
        send_event_on_commit("catalog.changed", {"server": name})


# --- tools --------------------------------------------------------------------------------


def _reclassify(server: Server) -> None:
    for tool in server.tools.all():
        cls = effective_class(tool.annotations, server.trusted, tool.class_override)
        if cls != tool.effective_class:
            tool.effective_class = cls
            tool.save(update_fields=["effective_class"])
    send_event_on_commit("catalog.changed", {"server": server.name})


@dataclass
class RefreshResult:
    server: str
    ok: bool
    tools: int = 0
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    error: str = ""
    # What it offers besides tools (hostapp/catalog/offers.py), when they could be listed.
    prompts: int = 0
    resources: int = 0  # resources and resource templates
    offers_quarantined: list[str] = field(default_factory=list)
    offers_error: str = ""


class _Stored(NamedTuple):
    """What a refresh reads of a stored tool: enough to compare and decide. The rest of the
    row (the pinned definition, the texts shown) is written when needed, never read."""

    pk: int
    original_name: str
    exposed_name: str
    name_warning: str
    definition: dict[str, Any]
    definition_hash: str
    pinned_hash: str
    class_override: str


def record_tools(server: Server, definitions: list[dict[str, Any]]) -> RefreshResult:
    """Merge a complete tool listing into the catalog: pin, quarantine, add and remove.

    Names are chosen before the transaction. Inside it, one query reads the server's tools
    (the columns compared, as tuples), and only tools whose definition differs from the
    stored one are hashed, cleaned and written, in one statement per kind of change: an
    unchanged listing costs a read and the server's refresh time, whatever its size.
    """
    result = RefreshResult(server.name, ok=True)
    by_name: dict[str, dict[str, Any]] = {}
    for definition in definitions:
        name = definition.get("name")
        if isinstance(name, str) and name and name not in by_name:
            by_name[name] = definition
    exposed = expose_names(server.name, by_name)
    now = timezone.now()
    with transaction.atomic():
        rows = Tool.objects.select_for_update().filter(server=server).values_list(*_Stored._fields)
        current = {row[1]: _Stored._make(row) for row in rows}
        gone = [t for name, t in current.items() if name not in by_name]
        if gone:
            Tool.objects.filter(pk__in=[t.pk for t in gone]).delete()
            result.removed = sorted(t.exposed_name for t in gone)
        # Free exposed names first, so that names can move between tools in one refresh.
        moving = [t for name, t in current.items() if name in by_name and t.exposed_name != exposed[name].name]
        if moving:
            tool_rows.update_rows(("exposed_name",), [(t.pk, {"exposed_name": f"~{t.pk}"}) for t in moving])
        to_create: list[dict[str, Any]] = []
        texts = tool_rows.Texts()  # the definitions written, encoded once
        # Tools to update, by the fields that change (each row is written as its save would).
        to_update: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for name, definition in by_name.items():
            names = exposed[name]
            tool = current.get(name)
            if tool is None:
                definition, digest = texts.stored(definition)
                trusted_new = server.trusted
                to_create.append(
                    {
                        "server_id": server.pk,
                        "original_name": name,
                        "exposed_name": names.name,
                        "name_warning": names.warning,
                        "definition": definition,
                        "definition_hash": digest,
                        "pinned_definition": definition if trusted_new else None,
                        "pinned_hash": digest if trusted_new else "",
                        "status": Tool.ACTIVE if trusted_new else Tool.QUARANTINED,
                        "quarantine_reason": "" if trusted_new else Tool.NEW,
                        "effective_class": effective_class(definition.get("annotations") or {}, server.trusted),
                        **_display_fields(definition),
                    }
                )
                result.added.append(names.name)
                if not trusted_new:
                    result.quarantined.append(names.name)
                continue
            update: dict[str, Any] = {}
            if tool.exposed_name != names.name or tool.name_warning != names.warning:
                update.update(exposed_name=names.name, name_warning=names.warning)
            # The stored hash is the hash of the stored definition (they are only ever written
            # together, here), so a definition that is the same needs no hashing.
            if not _same_json(definition, tool.definition):
                definition, digest = texts.stored(definition)
                if digest == tool.definition_hash and definition != tool.definition:
                    # Outside the pin (icons, _meta): keep what is shown current, nothing to review.
                    update.update(definition=definition, **_display_fields(definition))
                if digest != tool.definition_hash:
                    update.update(
                        definition=definition, definition_hash=digest, changed_at=now, **_display_fields(definition)
                    )
                    update["effective_class"] = effective_class(
                        definition.get("annotations") or {}, server.trusted, tool.class_override
                    )
                    if tool.pinned_hash and digest != tool.pinned_hash:
                        update.update(status=Tool.QUARANTINED, quarantine_reason=Tool.CHANGED)
                        result.quarantined.append(names.name)
                    elif tool.pinned_hash and digest == tool.pinned_hash:
                        # Changed back to what was accepted: nothing left to review.
                        update.update(status=Tool.ACTIVE, quarantine_reason="")
                    result.changed.append(names.name)
            if update:
                to_update[tuple(sorted(update))].append((tool.pk, update))
        for fields, updates in to_update.items():
            tool_rows.update_rows(fields, updates, texts)
        if to_create:
            tool_rows.insert_rows(to_create, now, texts)
        server.tools_refreshed_at = now
        server.last_refresh_at = now
        server.stale = False
        server.refresh_error = ""
        server.save(update_fields=["tools_refreshed_at", "last_refresh_at", "stale", "refresh_error"])
        result.tools = len(by_name)
        if result.added or result.changed or result.removed or moving:
            # Open catalog pages (and agents) hear of a refresh only when it changed something.
            send_event_on_commit("catalog.changed", {"server": server.name})
        send_event_on_commit("server.changed", {"names": [server.name]})
    return result


def mark_refresh_failed(server: Server, failure: McpFailure | str) -> RefreshResult:
    """The server could not be listed: keep its last good tools, marked stale."""
    message = str(failure.message if isinstance(failure, McpFailure) else failure)
    with transaction.atomic():
        server.stale = True
        server.refresh_error = message[:2000]
        server.last_refresh_at = timezone.now()
        server.save(update_fields=["stale", "refresh_error", "last_refresh_at"])
        send_event_on_commit("server.changed", {"names": [server.name]})
    return RefreshResult(server.name, ok=False, tools=server.tools.count(), error=message)


def accept_tool(tool: Tool, user: Any) -> None:
    """A person reviewed the tool's current definition: pin it and make it callable."""
    with transaction.atomic():
        tool.pinned_definition = tool.definition
        tool.pinned_hash = tool.definition_hash
        tool.status = Tool.ACTIVE
        tool.quarantine_reason = ""
        tool.accepted_at = timezone.now()
        tool.accepted_by = user if getattr(user, "pk", None) else None
        tool.save(
            update_fields=[
                "pinned_definition",
                "pinned_hash",
                "status",
                "quarantine_reason",
                "accepted_at",
                "accepted_by",
            ]
        )
        send_event_on_commit("catalog.changed", {"server": tool.server.name, "tool": tool.exposed_name})


def set_class_override(tool: Tool, override: str) -> None:
    if override not in ("", READ_ONLY, WRITE, DESTRUCTIVE):
        raise ValueError(f"unknown class {override!r}")
    with transaction.atomic():
        tool.class_override = override
        tool.effective_class = effective_class(tool.annotations, tool.server.trusted, override)
        tool.save(update_fields=["class_override", "effective_class"])
        send_event_on_commit("catalog.changed", {"server": tool.server.name, "tool": tool.exposed_name})


class OverrideError(ValueError):
    """An override that cannot be kept: the message says why (a clash names the other tool)."""


def check_agent_name(tool: Tool, name: str) -> str:
    """`name` as `tool`'s name for agents ("": no rename), or OverrideError saying why not.

    A new name must be model-safe and unique in every view that can show it: among every
    tool's name in prefixed views (exposed names and other renames), and among the names of
    its own server's tools in a view of that server without the prefix."""
    name = name.strip()
    if not name or name == tool.exposed_name:
        return ""
    try:
        name = check_rename(name)
    except ValueError as exc:
        raise OverrideError(str(exc)) from None
    clash = (
        Tool.objects.exclude(pk=tool.pk)
        .filter(models.Q(exposed_name=name) | models.Q(agent_name=name))
        .values_list("exposed_name", flat=True)
        .first()
    )
    if clash is not None:
        raise OverrideError(f"{name!r} is taken: agents already see {clash} by that name")
    siblings = Tool.objects.filter(server_id=tool.server_id).exclude(pk=tool.pk).values_list("original_name", flat=True)
    own = {e.name: original for original, e in own_names([*siblings, tool.original_name]).items()}
    if own.get(name, tool.original_name) != tool.original_name:
        raise OverrideError(
            f"{name!r} is taken in a view of {tool.server.name} without the prefix: it is the name of its tool "
            f"{own[name]!r}"
        )
    return name


def set_override(tool: Tool, name: str, description: str, user: Any) -> None:
    """What agents are given for `tool` from now on: its name (`check_agent_name`) and its
    description (blank: the server's), cleaned as a server's is. On record: who and when."""
    description, _ = _clean(description, DESCRIPTION_CAP)
    with transaction.atomic():
        name = check_agent_name(tool, name)
        overridden = bool(name or description)
        tool.agent_name, tool.agent_description = name, description
        tool.override_at = timezone.now() if overridden else None
        tool.override_by = user if overridden and getattr(user, "pk", None) else None
        tool.save(update_fields=["agent_name", "agent_description", "override_at", "override_by"])
        send_event_on_commit("catalog.changed", {"server": tool.server.name, "tool": tool.exposed_name})
