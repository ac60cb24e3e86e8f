"""How a refresh's merge writes many tool rows at once (hostapp/catalog/actions.py,
`record_tools`): the inserts and updates as `bulk_create` and `save(update_fields=...)` would
write them, for less.

Values are prepared once where they recur, and a JSON value is encoded once (`Texts`). On
PostgreSQL, new tools go in with one COPY and updates run with the values bound by the
server, both through Django's cursor wrapper: that reaches under Django's public API, in one
function (`_on_postgresql`), checked against the versions in `CHECKED` (a test fails when
the installed ones differ). Measured A/B against the public ORM (`bulk_create`, and
`bulk_create(update_conflicts=True)` for the updates) on the catalog benchmark: it saves
43% of a first refresh and 25% of a changed one on PostgreSQL, 7-29% on SQLite
(docs/benchmarks.md, "Private-API reaches: A/B").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from typing import Any, cast

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import Field
from psycopg.types.json import Jsonb

from .models import Tool, stored_definition

# The releases `_on_postgresql` was checked against (requirements.txt pins them).
CHECKED = {"Django": "5.2.19", "psycopg": "3.3.9"}


class Texts:
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

    def __init__(self, fields: list[Field], texts: Texts | None = None) -> None:
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
        return Jsonb(text, dumps=str)
    return text


def update_rows(fields: tuple[str, ...], updates: list[tuple[int, dict[str, Any]]], texts: Texts | None = None) -> None:
    """Set `fields` of each tool `(pk, values)` as `save(update_fields=fields)` would: one
    statement, executed for every row (`executemany`: SQLite runs it prepared, psycopg in one
    pipeline). `bulk_update` would send a single statement but builds a CASE WHEN per field
    and row in the ORM: ~2 ms of CPU per tool, more than the row-by-row saves it replaces.
    Values are prepared as each field prepares them (`_Preparer`, given `texts`)."""
    meta = Tool._meta
    # Fields of the tool's own, as `update_fields` names them: never a reverse relation.
    columns = [cast(Field, meta.get_field(name)) for name in fields]
    quote = connection.ops.quote_name
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(meta.db_table),
        ", ".join(f"{quote(_column(f))} = %s" for f in columns),
        quote(_column(meta.pk)),
    )
    prepare = _Preparer(columns, texts)
    rows = [[*(prepare(f, values[f.name]) for f in columns), pk] for pk, values in updates]
    _execute_many(sql, rows)


def _column(field: Field) -> str:
    """The column of a concrete field (a field is concrete when it has one)."""
    assert field.column is not None
    return field.column


def _execute_many(sql: str, rows: list[list[Any]]) -> None:
    """Run `sql` for each of `rows`: one statement, executed for every row (SQLite runs it
    prepared; on PostgreSQL, `_on_postgresql`)."""
    if connection.vendor == "postgresql":
        _on_postgresql(sql, rows, copy=False)
        return
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def insert_rows(rows: list[dict[str, Any]], now: datetime, texts: Texts | None = None) -> None:
    """Insert new tools, each given as `{attname: value}`, as `bulk_create` would write them
    (each missing field's default, `now` for `auto_now_add`, each value as its field
    prepares it for the database), in one statement for every row (`_write_rows`).

    Without a model instance per row, and with the preparation that is the same for every
    row done once: strings go to text columns as they are (what preparing them does), the
    fields a row does not give and the values that recur are prepared once, and one JSON
    value given for two columns (a trusted tool's definition and its pin) is encoded once,
    to the text Django's JSON field would send, or not at all where its text is known
    (`Texts`)."""
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
    texts = texts if texts is not None else Texts()
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
    _write_rows(meta.db_table, [_column(f) for f in fields], prepared_rows)


def _write_rows(table: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Insert `rows` (values prepared for the database; JSON as its text) into `table`: on
    PostgreSQL with one COPY (`_on_postgresql`), elsewhere with one INSERT executed for every
    row."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    if connection.vendor == "postgresql":
        _on_postgresql(f"COPY {quote(table)} ({names}) FROM STDIN", rows, copy=True)
        return
    _execute_many(f"INSERT INTO {quote(table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))})", rows)


def _on_postgresql(sql: str, rows: list[list[Any]], *, copy: bool) -> None:
    """The one place under Django's public API (`CHECKED` pins what it was checked against).

    `copy`: `sql` is a COPY FROM STDIN, and the rows stream in psycopg's copy format, with no
    statement per row to bind, quote (Django's psycopg cursors bind on the client) and plan.
    Otherwise `sql` runs for every row with the values bound by the server, in Django's own
    server-binding cursor: the connection's cursors bind them on the client, quoting every
    value into the statement's text, which for a hundred JSON definitions costs more than
    sending them. Either way through Django's cursor wrapper, as it runs its own statements:
    the connection's execute wrappers, its errors, its query log (a COPY with its row count).
    """
    if not copy:
        connection.ensure_connection()
        bound = ServerBindingCursor(connection.connection)  # type: ignore[call-arg]  # stubs lack its psycopg base
        wrap = connection.make_debug_cursor if connection.queries_logged else connection.make_cursor
        with wrap(bound) as cursor:  # type: ignore[arg-type]  # stubs: a CursorWrapper; really a DB-API cursor
            cursor.executemany(sql, rows)
        return
    with connection.cursor() as cursor:

        def copy_rows(sql: str, rows: list[list[Any]], *ignored_wrapper_args: Any) -> None:
            connection.validate_no_broken_transaction()
            with connection.wrap_database_errors, cursor.cursor.copy(sql) as stream:
                for row in rows:
                    stream.write_row(row)

        logged = cursor.debug_sql(f"{sql} -- {len(rows)} rows") if isinstance(cursor, CursorDebugWrapper) else None
        with logged or nullcontext():
            cursor._execute_with_wrappers(sql, rows, many=True, executor=copy_rows)
