"""Merging a listing fast: few statements, no work for what did not change, the same outcome.

`record_tools` reads a server's tools once, hashes and cleans only the definitions that
differ from the stored ones, and writes each kind of change in one statement. These tests
pin the statement counts (constant in the number of tools) and check that a refresh that
mixes every kind of change ends where the row-by-row merge ended.
"""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import version
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from hostapp.catalog import actions, tool_rows
from hostapp.catalog.models import DESTRUCTIVE, READ_ONLY, WRITE, Tool, definition_hash
from hostapp.mcp.sanitize import DESCRIPTION_CAP, TITLE_CAP, clean_text, removed_characters

from .conftest import listed, make_server, tool_def

pytestmark = pytest.mark.django_db


def tool(exposed_name: str) -> Tool:
    return Tool.objects.get(exposed_name=exposed_name)


def catalog_listing(n: int, revision: int = 0) -> list[dict[str, Any]]:
    """`n` tools shaped like real ones (schemas, annotations, a title on some)."""
    suffix = f" (Revision {revision}.)" if revision else ""
    return [
        tool_def(
            f"tool_{i:03d}",
            f"Does thing {i} to a record in the workspace, newest first.{suffix}",
            annotations={"readOnlyHint": i % 3 == 0, "destructiveHint": i % 3 == 2},
            inputSchema={
                "type": "object",
                "properties": {"id": {"type": "string", "maxLength": 64}, "limit": {"type": "integer", "default": 50}},
                "required": ["id"],
            },
            **({"title": f"Thing {i}"} if i % 2 else {}),
        )
        for i in range(n)
    ]


def statements(server: Any, definitions: list[dict[str, Any]]) -> list[str]:
    """The SQL `record_tools` sends (savepoints aside: the test's transaction adds those)."""
    with CaptureQueriesContext(connection) as ctx:
        actions.record_tools(server, definitions)
    return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"].upper()]


def verbs(sql: list[str]) -> list[str]:
    """Each statement's verb and table: `SELECT catalog_tool`, `UPDATE catalog_server`...

    One statement run for many rows (`executemany`, logged as "N times: ...", or a COPY on
    PostgreSQL) counts once."""
    out = []
    for statement in sql:
        words = re.sub(r"^\d+ times: ", "", statement).replace('"', "").split()
        verb = words[0].upper()
        table = {"SELECT": "FROM", "UPDATE": "UPDATE", "INSERT": "INTO", "DELETE": "FROM", "COPY": "COPY"}.get(verb)
        out.append(f"{verb} {words[words.index(table) + 1]}" if table in words else verb)
    return out


# --- statements per refresh -----------------------------------------------------------------


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_an_unchanged_refresh_reads_once_and_writes_only_the_servers_refresh_time(trusted: bool) -> None:
    small = listed(make_server("small", trusted=trusted), *catalog_listing(3))
    large = listed(make_server("large", trusted=trusted), *catalog_listing(60))

    for server, n in ((small, 3), (large, 60)):
        sql = statements(server, catalog_listing(n))

        assert verbs(sql) == ["SELECT catalog_tool", "UPDATE catalog_server"], sql


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_new_tools_are_inserted_in_one_statement_for_3_or_60_tools(trusted: bool) -> None:
    insert = "COPY catalog_tool" if connection.vendor == "postgresql" else "INSERT catalog_tool"
    for n in (3, 60):
        server = make_server(f"new-{n}", trusted=trusted)

        sql = statements(server, catalog_listing(n))

        assert verbs(sql) == ["SELECT catalog_tool", insert, "UPDATE catalog_server"], sql
        assert sql[1].startswith(f"{n} times: INSERT") or sql[1].endswith(f"FROM STDIN -- {n} rows")
        assert Tool.objects.filter(server=server).count() == n


def test_the_merges_statements_pass_through_the_connections_execute_wrappers() -> None:
    """Instrumentation hooked on `connection.execute_wrapper` sees the inserts and updates,
    which on PostgreSQL run past Django's cursor (a COPY, server-bound updates)."""
    seen: list[tuple[str, bool, int]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        seen.append((sql.split()[0].upper(), many, len(params) if many else 0))
        return execute(sql, params, many, context)

    server = make_server("files", trusted=True)
    with connection.execute_wrapper(wrapper):
        actions.record_tools(server, catalog_listing(5))
        actions.record_tools(server, catalog_listing(5, revision=1))

    many = [entry for entry in seen if entry[1]]
    insert = "COPY" if connection.vendor == "postgresql" else "INSERT"
    assert many == [(insert, True, 5), ("UPDATE", True, 5)]
    assert Tool.objects.filter(server=server, description__endswith="(Revision 1.)").count() == 5


def test_a_refused_insert_raises_djangos_error_and_writes_nothing() -> None:
    server = listed(make_server("files", trusted=True), *catalog_listing(2))
    row = {"server_id": server.pk, "original_name": "other", "exposed_name": "files__tool_000", "definition": {}}

    with pytest.raises(IntegrityError), transaction.atomic():
        tool_rows.insert_rows([dict(row, exposed_name="files__fresh"), row], timezone.now())

    assert sorted(Tool.objects.values_list("exposed_name", flat=True)) == ["files__tool_000", "files__tool_001"]


def test_an_unchanged_refresh_reads_only_the_columns_it_compares() -> None:
    server = listed(make_server("files", trusted=True), *catalog_listing(3))

    (select, _) = statements(server, catalog_listing(3))

    columns = select.split(" FROM ")[0]
    assert '"definition"' in columns
    for never_read in ("pinned_definition", "description", "icons", "text_warning", "changed_at"):
        assert never_read not in columns


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_changing_every_tool_takes_the_same_statements_for_3_or_60_tools(trusted: bool) -> None:
    small = listed(make_server("small", trusted=trusted), *catalog_listing(3))
    large = listed(make_server("large", trusted=trusted), *catalog_listing(60))

    counted = {}
    for server, n in ((small, 3), (large, 60)):
        sql = statements(server, catalog_listing(n, revision=1))
        counted[n] = verbs(sql)
        assert Tool.objects.filter(server=server, description__endswith="(Revision 1.)").count() == n

    assert counted[3] == counted[60] == ["SELECT catalog_tool", "UPDATE catalog_tool", "UPDATE catalog_server"]


def test_tools_released_and_quarantined_in_one_refresh_share_one_update() -> None:
    server = listed(make_server("files", trusted=True), *catalog_listing(10))
    listed(server, *catalog_listing(5, revision=1), *catalog_listing(10)[5:])  # 0-4 quarantined

    # 0-4 go back to what was accepted, 5-9 change: the same columns change, to other values.
    sql = statements(server, [*catalog_listing(5), *catalog_listing(10, revision=2)[5:]])

    assert verbs(sql) == ["SELECT catalog_tool", "UPDATE catalog_tool", "UPDATE catalog_server"]
    statuses = dict(Tool.objects.values_list("original_name", "status"))
    assert {statuses[f"tool_{i:03d}"] for i in range(5)} == {Tool.ACTIVE}
    assert {statuses[f"tool_{i:03d}"] for i in range(5, 10)} == {Tool.QUARANTINED}


def test_each_set_of_changed_columns_is_one_update() -> None:
    with_icon = [dict(d, icons=[{"src": "https://a.example/1.png"}]) for d in catalog_listing(6)]
    server = listed(make_server("files", trusted=True), *with_icon)
    new_icons = [dict(d, icons=[{"src": "https://a.example/2.png"}]) for d in with_icon[:3]]

    # 0-2: a new icon (outside the pin); 3-5: new descriptions (pinned, quarantined).
    sql = statements(server, [*new_icons, *catalog_listing(6, revision=1)[3:]])

    assert verbs(sql) == ["SELECT catalog_tool", "UPDATE catalog_tool", "UPDATE catalog_tool", "UPDATE catalog_server"]
    rows = {t.original_name: t for t in Tool.objects.all()}
    for i in range(3):
        assert rows[f"tool_{i:03d}"].icons == [{"src": "https://a.example/2.png"}]
        assert rows[f"tool_{i:03d}"].status == Tool.ACTIVE
    for i in range(3, 6):
        assert rows[f"tool_{i:03d}"].status == Tool.QUARANTINED
        assert rows[f"tool_{i:03d}"].icons == []


# --- one refresh with every kind of change --------------------------------------------------


def test_a_mixed_refresh_changes_adds_removes_and_renames_in_one_call(reviewer: Any) -> None:
    server = make_server("files", trusted=True)
    before = [
        tool_def("same", "Unchanged", annotations={"readOnlyHint": True}),
        tool_def("edit", "Edits a file", annotations={"destructiveHint": False}),
        tool_def("back", "Accepted text"),
        tool_def("icon", "Has an icon", icons=[{"src": "https://a.example/1.png"}]),
        tool_def("gone", "Will disappear"),
        tool_def("a.b", "Holds the clean name until a_b arrives"),
        tool_def("fresh", "Unreviewed, untouched"),
    ]
    listed(server, *before)
    # "back" changed once (quarantined); "fresh" was changed and its change accepted.
    listed(server, *before[:2], tool_def("back", "Sneaky text"), *before[3:])
    listed(server, *before[:2], tool_def("back", "Sneaky text"), *before[3:6], tool_def("fresh", "Reviewed"))
    actions.accept_tool(tool("files__fresh"), reviewer)
    stamps = dict(Tool.objects.values_list("original_name", "changed_at"))
    pks = dict(Tool.objects.values_list("original_name", "pk"))
    assert tool("files__back").status == Tool.QUARANTINED
    assert tool("files__a_b").original_name == "a.b"

    result = actions.record_tools(
        server,
        [
            tool_def("same", "Unchanged", annotations={"readOnlyHint": True}),
            tool_def("edit", "Edits a file, and now deletes it", annotations={"readOnlyHint": True}),
            tool_def("back", "Accepted text"),
            tool_def("icon", "Has an icon", icons=[{"src": "https://a.example/2.png"}]),
            tool_def("a.b", "Holds the clean name until a_b arrives"),
            tool_def("a_b", "Takes its own name"),
            tool_def("fresh", "Reviewed"),
            tool_def("new", "Brand new\u200b tool", title="New\u202e"),
        ],
    )

    moved = Tool.objects.get(original_name="a.b").exposed_name
    assert moved.startswith("files__a_b_")
    assert result.added == ["files__a_b", "files__new"]
    assert sorted(result.changed) == ["files__back", "files__edit"]
    assert result.removed == ["files__gone"]
    assert result.quarantined == ["files__edit"]
    assert result.tools == 8
    rows = {t.original_name: t for t in Tool.objects.all()}
    assert set(rows) == {"same", "edit", "back", "icon", "a.b", "a_b", "fresh", "new"}
    # The same rows as before (none re-created), except the new ones.
    assert all(rows[name].pk == pks[name] for name in rows if name in pks)
    # Unchanged and outside-the-pin changes keep their change time; pinned changes get a new one.
    for name in ("same", "icon", "a.b", "fresh"):
        assert rows[name].changed_at == stamps[name], name
    for name in ("edit", "back"):
        assert rows[name].changed_at > stamps[name], name
    edit = rows["edit"]
    assert (edit.status, edit.quarantine_reason) == (Tool.QUARANTINED, Tool.CHANGED)
    assert edit.description == "Edits a file, and now deletes it"
    assert edit.effective_class == READ_ONLY
    assert edit.definition_hash == definition_hash(
        tool_def("edit", "Edits a file, and now deletes it", annotations={"readOnlyHint": True})
    )
    assert edit.pinned_hash == definition_hash(before[1])
    back = rows["back"]
    assert (back.status, back.quarantine_reason) == (Tool.ACTIVE, "")
    assert back.description == "Accepted text"
    assert back.definition_hash == back.pinned_hash
    icon = rows["icon"]
    assert icon.status == Tool.ACTIVE
    assert icon.icons == [{"src": "https://a.example/2.png"}]
    assert icon.definition["icons"] == [{"src": "https://a.example/2.png"}]
    assert rows["a_b"].exposed_name == "files__a_b"
    assert "collides with 'a_b'" in rows["a.b"].name_warning
    assert rows["a_b"].status == Tool.ACTIVE
    assert rows["fresh"].status == Tool.ACTIVE
    assert rows["fresh"].accepted_by == reviewer
    new = rows["new"]
    assert (new.status, new.description, new.title) == (Tool.ACTIVE, "Brand new tool", "New")
    assert new.text_warning == "2 invisible or control characters were removed"
    assert new.pinned_definition == new.definition


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_new_tools_are_written_as_bulk_create_writes_them(trusted: bool) -> None:
    """Every column of a tool the merge inserts (defaults and all) is what Django's own
    `bulk_create` writes for a Tool built from the same values."""
    server = listed(make_server("files", trusted=trusted), *catalog_listing(4))
    mine = list(Tool.objects.filter(server=server).order_by("original_name"))
    Tool.objects.filter(server=server).delete()
    Tool.objects.bulk_create([Tool(**{name: getattr(t, name) for name in GIVEN}) for t in mine])

    def raw_rows() -> list[tuple[Any, ...]]:
        columns = [
            f.column for f in Tool._meta.concrete_fields if f.attname not in ("id", "first_seen_at", "changed_at")
        ]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(columns)} FROM catalog_tool ORDER BY original_name")
            return cursor.fetchall()

    theirs = raw_rows()
    Tool.objects.filter(server=server).delete()
    listed(server, *catalog_listing(4))
    assert raw_rows() == theirs
    assert all(t.first_seen_at == t.changed_at == t.server.tools_refreshed_at for t in Tool.objects.all())


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_changed_tools_are_written_as_save_writes_them(trusted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column of a tool the merge updates holds what Django's own `save(update_fields=...)`
    writes for the values the merge updates it with: JSON objects and empty lists, the
    refresh's time, texts, a status."""
    server = listed(make_server("files", trusted=trusted), *catalog_listing(4))
    before = {t.pk: t for t in Tool.objects.filter(server=server)}
    revised = catalog_listing(4, revision=1)
    revised[1]["icons"] = [{"src": "https://example.com/thing.png", "mimeType": "image/png"}]
    revised[2]["title"] = "Thing\u200b 2"
    updates: list[tuple[tuple[str, ...], list[tuple[int, dict[str, Any]]]]] = []
    update_rows = tool_rows.update_rows

    def spy(fields: tuple[str, ...], rows: list[tuple[int, dict[str, Any]]], texts: Any = None) -> None:
        updates.append((fields, rows))
        update_rows(fields, rows, texts)

    monkeypatch.setattr(tool_rows, "update_rows", spy)
    listed(server, *revised)

    def raw_rows() -> list[tuple[Any, ...]]:
        columns = [f.column for f in Tool._meta.concrete_fields]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(columns)} FROM catalog_tool ORDER BY original_name")
            return cursor.fetchall()

    merged = raw_rows()
    written = {(pk, name) for fields, rows in updates for pk, _ in rows for name in fields}
    assert {"icons", "changed_at", "definition", "title", "text_warning"} <= {name for _, name in written}
    for old in before.values():
        old.save()  # the rows as they were
    for fields, rows in updates:
        for pk, values in rows:
            tool = Tool.objects.get(pk=pk)
            for name in fields:
                setattr(tool, name, values[name])
            tool.save(update_fields=fields)
    assert raw_rows() == merged
    assert [t.icons for t in Tool.objects.filter(server=server).order_by("original_name")][:2] == [
        [],
        [{"src": "https://example.com/thing.png", "mimeType": "image/png"}],
    ]


# The fields the merge gives a new tool (the others take their defaults).
GIVEN = {
    "server_id", "original_name", "exposed_name", "name_warning", "definition", "definition_hash",
    "pinned_definition", "pinned_hash", "status", "quarantine_reason", "effective_class", "title", "description",
    "text_warning", "icons",
}  # fmt: skip


def test_a_mixed_refresh_of_an_untrusted_server_quarantines_what_is_new() -> None:
    server = listed(make_server("mail"), tool_def("read", "Reads"), tool_def("gone", "Goes"))

    result = actions.record_tools(server, [tool_def("read", "Reads, changed"), tool_def("send", "Sends")])

    assert (result.added, result.changed, result.removed) == (["mail__send"], ["mail__read"], ["mail__gone"])
    assert sorted(result.quarantined) == ["mail__send"]  # "read" was never accepted: still new
    for name in ("mail__read", "mail__send"):
        t = tool(name)
        assert (t.status, t.quarantine_reason, t.effective_class) == (Tool.QUARANTINED, Tool.NEW, DESTRUCTIVE)
    assert tool("mail__read").description == "Reads, changed"


def test_names_can_swap_between_tools_in_one_refresh() -> None:
    """Both exposed names move at once; the unique names never collide on the way."""
    server = listed(make_server("files", trusted=True), tool_def("a.b"))
    listed(server, tool_def("a.b"), tool_def("a_b"))
    clean, suffixed = tool("files__a_b"), Tool.objects.get(original_name="a.b")

    result = actions.record_tools(server, [tool_def("a.b", "Now changed too")])

    assert result.removed == ["files__a_b"]
    assert Tool.objects.get(pk=suffixed.pk).exposed_name == "files__a_b"
    assert not Tool.objects.filter(pk=clean.pk).exists()
    assert result.changed == ["files__a_b"]


# --- what counts as the same definition -----------------------------------------------------


def test_a_listing_in_another_key_order_is_unchanged() -> None:
    definition = tool_def("read", "Read a file", annotations={"readOnlyHint": True, "openWorldHint": False})
    server = listed(make_server("files", trusted=True), definition)
    reordered = {key: definition[key] for key in reversed(definition)}
    reordered["annotations"] = {"openWorldHint": False, "readOnlyHint": True}

    sql = statements(server, [reordered])

    assert verbs(sql) == ["SELECT catalog_tool", "UPDATE catalog_server"]
    assert tool("files__read").status == Tool.ACTIVE


# Python has True == 1 == 1.0; JSON (and the pin's hash) does not.
RETYPED = [
    ("a boolean hint becomes 1", {"readOnlyHint": True}, {"readOnlyHint": 1}, "annotations"),
    (
        "an integer becomes a float",
        {"type": "integer", "maximum": 10},
        {"type": "integer", "maximum": 10.0},
        "inputSchema",
    ),
    ("false becomes 0", {"destructiveHint": False}, {"destructiveHint": 0}, "annotations"),
]


@pytest.mark.parametrize(("old", "new", "key"), [r[1:] for r in RETYPED], ids=[r[0] for r in RETYPED])
def test_a_value_that_changes_type_but_not_python_equality_is_a_change(old: dict, new: dict, key: str) -> None:
    server = listed(make_server("files", trusted=True), tool_def("read", "Read", **{key: old}))
    assert tool_def("read", "Read", **{key: old}) == tool_def("read", "Read", **{key: new})

    result = actions.record_tools(server, [tool_def("read", "Read", **{key: new})])

    t = tool("files__read")
    assert result.changed == ["files__read"]
    assert (t.status, t.quarantine_reason) == (Tool.QUARANTINED, Tool.CHANGED)
    assert t.definition_hash == definition_hash(tool_def("read", "Read", **{key: new}))
    # Stored as listed, types included (True is not 1, 10.0 is not 10).
    assert json.dumps(t.definition[key], sort_keys=True) == json.dumps(new, sort_keys=True)


def test_a_retyped_value_outside_the_pin_updates_the_definition_only_as_before() -> None:
    """Outside the pinned keys, Python equality decided before and still does: nothing to write."""
    server = listed(make_server("files", trusted=True), tool_def("read", _meta={"version": 1}))

    result = actions.record_tools(server, [tool_def("read", _meta={"version": 1.0})])

    assert (result.changed, result.quarantined) == ([], [])
    assert tool("files__read").status == Tool.ACTIVE


def test_an_override_survives_a_bulk_change() -> None:
    server = listed(make_server("files", trusted=True), *catalog_listing(4))
    actions.set_class_override(tool("files__tool_000"), WRITE)

    actions.record_tools(server, catalog_listing(4, revision=3))

    assert tool("files__tool_000").effective_class == WRITE
    assert tool("files__tool_000").class_override == WRITE
    assert tool("files__tool_003").effective_class == READ_ONLY


# --- events ---------------------------------------------------------------------------------


def test_catalog_changed_is_announced_only_when_something_changed(sent: list[tuple[str, dict[str, Any]]]) -> None:
    server = make_server("files", trusted=True)
    actions.record_tools(server, catalog_listing(5))
    assert [kind for kind, _ in sent] == ["catalog.changed", "server.changed"]

    sent.clear()
    actions.record_tools(server, catalog_listing(5))
    assert [kind for kind, _ in sent] == ["server.changed"]

    sent.clear()
    actions.record_tools(server, catalog_listing(5, revision=1))
    assert [kind for kind, _ in sent] == ["catalog.changed", "server.changed"]


# --- the shown texts: the same as clean_text and removed_characters, faster -----------------

TEXTS = [
    "",
    "plain",
    "  padded on both sides \n",
    "lines\nand\ttabs\r\nand a carriage return",
    "non-breaking\u00a0space and ideographic\u3000space",
    "accents é, CJK 漢字, emoji 🙂, combining e\u0301",
    "bidi \u202eevil\u202c and zero width\u200b and bom\ufeff",
    "hangul filler \u3164 and combining grapheme joiner \u034f",
    "line separator\u2028paragraph\u2029next line\x85done",
    "controls \x00\x07\x1b[31m red \x7f",
    "private use \ue000 and unassigned \U000e0001 tag",
    "x" * (DESCRIPTION_CAP + 50),
    "y" * (DESCRIPTION_CAP - 1) + "   z",
    "w" * (DESCRIPTION_CAP - 2) + "\u200b\u200b\u200bend",
    "t" * TITLE_CAP + " more",
    "\u200b" * 10,
    "   ",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("cap", [DESCRIPTION_CAP, TITLE_CAP])
def test_cleaning_gives_what_clean_text_and_removed_characters_give(text: str, cap: int) -> None:
    assert actions._clean(text, cap) == (clean_text(text, cap), removed_characters(text))


@pytest.mark.parametrize("value", [None, 42, ["not", "text"]])
def test_cleaning_a_value_that_is_not_text_matches_too(value: Any) -> None:
    assert actions._clean(value, TITLE_CAP) == (clean_text(value, TITLE_CAP), removed_characters(value))


def test_every_character_the_fast_path_lets_through_is_one_clean_text_keeps() -> None:
    """The shortcut skips the per-character loop only for text the loop would not change."""
    every = (chr(code) for code in range(sys.maxunicode + 1))
    kept = "".join(ch for ch in every if actions._unchanged_by_cleaning(ch))
    assert "\n" in kept and "\t" in kept and "é" in kept and "🙂" in kept
    for dropped in "\u200b\u202e\u3164\u034f\u2028\x85\x00\ue000\ud800":
        assert dropped not in kept

    assert clean_text(f"a{kept}b", cap=len(kept) + 3) == f"a{kept}b"


@pytest.mark.parametrize("text", TEXTS)
def test_the_display_fields_are_those_of_the_sanitizer(text: str) -> None:
    definition = tool_def("t", text, title=text[:300], icons=[{"src": "https://a.example/i.png"}, {"src": "http://x"}])
    dropped = removed_characters(text) + removed_characters(text[:300])

    assert actions._display_fields(definition) == {
        "title": clean_text(text[:300], TITLE_CAP),
        "description": clean_text(text),
        "icons": [{"src": "https://a.example/i.png"}],
        "text_warning": f"{dropped} invisible or control characters were removed" if dropped else "",
    }


def test_the_reach_under_djangos_api_was_checked_against_the_installed_releases() -> None:
    """`tool_rows._on_postgresql` uses Django's and psycopg's internals. When either is
    upgraded, check it against the new release (and measure it again, docs/benchmarks.md)
    before changing `CHECKED`."""
    assert {name: version(name) for name in tool_rows.CHECKED} == tool_rows.CHECKED
