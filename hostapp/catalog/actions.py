"""Every change to servers and tools: each function owns its transaction.

Views, tasks and commands parse input and call these; nothing else writes the catalog.
Live events leave only after commit.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import Field
from django.utils import timezone

from hostapp.core.events import send_event_on_commit
from hostapp.mcp import McpFailure
from hostapp.mcp.config import ConfigError, ServerConfig, parse_document, render_document
from hostapp.mcp.pool import ServerStatus
from hostapp.mcp.sanitize import (
    _BIDI,
    _INVISIBLE,
    _LINE_SEPARATORS,
    DESCRIPTION_CAP,
    TITLE_CAP,
    clean_text,
    safe_icons,
)

from .models import DESTRUCTIVE, READ_ONLY, SECRET_MASK, WRITE, Server, Tool, storable, stored_definition
from .naming import expose_names

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
        if trust_changed:
            _reclassify(server)
        send_event_on_commit("server.changed", {"names": [server.name]})


def set_enabled(server: Server, enabled: bool) -> None:
    with transaction.atomic():
        server.enabled = enabled
        server.config_changed_at = timezone.now()
        server.state = "idle" if enabled else "disabled"
        server.save(update_fields=["enabled", "config_changed_at", "state"])
        send_event_on_commit("server.changed", {"names": [server.name]})


def delete_server(server: Server) -> None:
    with transaction.atomic():
        name = server.name
        server.delete()
        send_event_on_commit("server.changed", {"names": [name]})
        send_event_on_commit("catalog.changed", {"server": name})


def record_statuses(statuses: list[ServerStatus]) -> None:
    """Store what a pool saw of servers (state, revision, errors) for the pages, in one
    transaction (many servers connecting at once report together). What a server sent (its
    info, its stderr) is stored as the JSON columns can keep it."""
    now = timezone.now()
    with transaction.atomic():
        for status in statuses:
            fields = {
                "state": status.state,
                "state_at": now,
                "stderr_tail": storable(list(status.stderr_tail)),
                "last_error": storable(status.last_error),
            }
            if status.protocol_version:
                fields.update(
                    protocol_version=status.protocol_version,
                    server_info=storable(status.server_info),
                    capabilities=storable(status.capabilities),
                    instructions=clean_text(status.instructions),
                )
            if Server.objects.filter(name=status.name).update(**fields):
                send_event_on_commit("server.changed", {"names": [status.name], "state": status.state})


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


class _Texts:
    """The JSON text of values about to be written, found by identity (each is kept with its
    text, so that no other object takes its id): a value given for two columns (a trusted
    tool's definition and its pin) is encoded once, and on PostgreSQL a definition is
    written as the text `stored_definition` encoded it to (`stored`)."""

    def __init__(self) -> None:
        # PostgreSQL's jsonb keeps the value, not the text; SQLite keeps the text as Django's
        # JSON field writes it (`encoded`).
        self.keep_stored = connection.vendor == "postgresql"
        self._by_id: dict[int, tuple[Any, str]] = {}

    def get(self, value: Any) -> str | None:
        entry = self._by_id.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def encoded(self, value: Any, encode: Callable[[Any], str]) -> str:
        """The text of `value`: the one known, or `encode(value)`, then known."""
        text = self.get(value)
        if text is None:
            text = encode(value)
            self._by_id[id(value)] = (value, text)
        return text

    def stored(self, definition: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """`stored_definition` (the definition as stored, its hash), its text kept where it is
        written as it is."""
        stored = stored_definition(definition, with_text=self.keep_stored)
        if stored.text is not None:
            self._by_id[id(stored.definition)] = (stored.definition, stored.text)
        return stored.definition, stored.digest


class _Preparer:
    """Prepares values of `fields` for the database as `field.get_db_prep_save(value)` does,
    for many rows.

    Strings go to text columns as they are (what preparing them does). Values that recur from
    row to row (the server's key, a status, the time of the refresh, an empty list of icons)
    are prepared once per field, type and value. A JSON value whose text is known (`texts`)
    is given as that text, as its field gives its own encoding. Other values (a JSON object,
    a float) are prepared by their field each time."""

    def __init__(self, fields: list[Field], texts: _Texts | None = None) -> None:
        kinds = {f.attname: f.get_internal_type() for f in fields}
        self.text = frozenset(name for name, kind in kinds.items() if kind in ("CharField", "TextField"))
        self.json = frozenset(name for name, kind in kinds.items() if kind == "JSONField")
        self._texts = texts
        self._recurring: dict[tuple[str, type, Any], Any] = {}

    def __call__(self, f: Field, value: Any) -> Any:
        if type(value) is str and f.attname in self.text:
            return value
        if isinstance(value, dict | list | float):  # objects; 0.0 == -0.0 but they differ
            if value or isinstance(value, float):
                if self._texts is not None and f.attname in self.json:
                    text = self._texts.get(value)
                    if text is not None:
                        return _json_param(text)
                return f.get_db_prep_save(value, connection=connection)
            key = (f.attname, type(value), None)
        else:
            key = (f.attname, type(value), value)
        try:
            return self._recurring[key]
        except KeyError:
            prepared = self._recurring[key] = f.get_db_prep_save(value, connection=connection)
            return prepared
        except TypeError:  # not hashable
            return f.get_db_prep_save(value, connection=connection)


def _json_param(text: str) -> Any:
    """A JSON value's text as a statement's parameter, where its field would give the value
    (`adapt_json_value`): PostgreSQL's is typed jsonb, the others' is the text."""
    if connection.vendor == "postgresql":
        from psycopg.types.json import Jsonb

        return Jsonb(text, dumps=str)
    return text


def _update_rows(
    fields: tuple[str, ...], updates: list[tuple[int, dict[str, Any]]], texts: _Texts | None = None
) -> None:
    """Set `fields` of each tool `(pk, values)` as `save(update_fields=fields)` would: one
    statement, executed for every row (`executemany`: SQLite runs it prepared, psycopg in one
    pipeline). `bulk_update` would send a single statement but builds a CASE WHEN per field
    and row in the ORM: ~2 ms of CPU per tool, more than the row-by-row saves it replaces.
    Values are prepared as each field prepares them (`_Preparer`, given `texts`)."""
    meta = Tool._meta
    columns = [meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(meta.db_table),
        ", ".join(f"{quote(f.column)} = %s" for f in columns),
        quote(meta.pk.column),
    )
    prepare = _Preparer(columns, texts)
    rows = [[*(prepare(f, values[f.name]) for f in columns), pk] for pk, values in updates]
    _execute_many(sql, rows)


def _execute_many(sql: str, rows: list[list[Any]]) -> None:
    """Run `sql` for each of `rows`: one statement, executed for every row (SQLite runs it
    prepared; psycopg sends it in one pipeline).

    On PostgreSQL the values are bound by the server, with Django's own server-binding
    cursor in Django's wrapper (its execute wrappers, errors and logging): the connection's
    cursors bind them on the client, quoting every value into the statement's text, which
    for a hundred JSON definitions costs more than sending them."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)
        return
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    bound = ServerBindingCursor(connection.connection)
    wrap = connection.make_debug_cursor if connection.queries_logged else connection.make_cursor
    with wrap(bound) as cursor:
        cursor.executemany(sql, rows)


def _insert_rows(rows: list[dict[str, Any]], now: datetime, texts: _Texts | None = None) -> None:
    """Insert new tools, each given as `{attname: value}`, as `bulk_create` would write them
    (each missing field's default, `now` for `auto_now_add`, each value as its field
    prepares it for the database), in one statement for every row (`_write_rows`).

    Without a model instance per row, and with the preparation that is the same for every
    row done once: strings go to text columns as they are (what preparing them does), the
    fields a row does not give and the values that recur are prepared once, and one JSON
    value given for two columns (a trusted tool's definition and its pin) is encoded once,
    to the text Django's JSON field would send, or not at all where its text is known
    (`_Texts`)."""
    meta = Tool._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    missing = {
        f.attname: f.get_db_prep_save(
            now if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False) else f.get_default(),
            connection=connection,
        )
        for f in fields
    }
    prepare = _Preparer(fields)
    texts = texts if texts is not None else _Texts()
    dumps = {f.attname: functools.partial(json.dumps, cls=f.encoder) for f in fields if f.attname in prepare.json}  # type: ignore[attr-defined]
    prepared_rows = []
    for row in rows:
        prepared = []
        for f in fields:
            name = f.attname
            if name not in row:
                prepared.append(missing[name])
                continue
            value = row[name]
            if name in prepare.json and isinstance(value, dict | list) and value:
                prepared.append(texts.encoded(value, dumps[name]))
            else:
                prepared.append(prepare(f, value))
        prepared_rows.append(prepared)
    _write_rows(meta.db_table, [f.column for f in fields], prepared_rows)


def _write_rows(table: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Insert `rows` (values prepared for the database; JSON as its text) into `table`.

    On PostgreSQL with one COPY: the rows stream in psycopg's copy format, with no statement
    per row to bind, quote (Django's psycopg cursors bind on the client) and plan. Elsewhere
    with one INSERT executed for every row. The COPY runs as Django's cursor runs its own
    statements (its execute wrappers, errors and logging), logged with its row count."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    if connection.vendor != "postgresql":
        _execute_many(f"INSERT INTO {quote(table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))})", rows)
        return
    sql = f"COPY {quote(table)} ({names}) FROM STDIN"
    with connection.cursor() as cursor:

        def copy_rows(sql: str, rows: list[list[Any]], *ignored_wrapper_args: Any) -> None:
            connection.validate_no_broken_transaction()
            with connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)

        logged = cursor.debug_sql(f"{sql} -- {len(rows)} rows") if isinstance(cursor, CursorDebugWrapper) else None
        with logged or nullcontext():
            # As the cursor runs its own statements: through the connection's execute wrappers.
            cursor._execute_with_wrappers(sql, rows, many=True, executor=copy_rows)


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
            _update_rows(("exposed_name",), [(t.pk, {"exposed_name": f"~{t.pk}"}) for t in moving])
        to_create: list[dict[str, Any]] = []
        texts = _Texts()  # the definitions written, encoded once
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
            _update_rows(fields, updates, texts)
        if to_create:
            _insert_rows(to_create, now, texts)
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


def refresh_server(server: Server) -> RefreshResult:
    """List the server's tools through this process's pool and merge them."""
    from .pool import pool_for

    if not server.enabled:
        return RefreshResult(server.name, ok=False, tools=server.tools.count(), error="the server is disabled")
    pool = pool_for(server)
    try:
        definitions = pool.list_tools(server.name)
    except McpFailure as failure:
        logger.warning("refresh of %s failed: %s", server.name, failure)
        return mark_refresh_failed(server, failure)
    return record_tools(server, definitions)


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


def request_refresh(names: list[str], reason: str) -> int:
    """Mark servers as being refreshed (for the page's progress) and queue the refreshes."""
    from .tasks import queue_refresh

    now = timezone.now()
    Server.objects.filter(name__in=names).update(refresh_requested_at=now)
    send_event_on_commit("server.changed", {"names": names})
    return sum(1 for name in names if queue_refresh(name, reason=reason, countdown=0))
