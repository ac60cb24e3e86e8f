"""The tool page's schema tree (hostapp.catalog.schema): names, types, notes, children."""

from __future__ import annotations

from typing import Any

from hostapp.catalog.schema import schema_tree


def node(tree: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(n for n in tree if n["name"] == name)


def test_it_shows_defaults_and_constants_as_json() -> None:
    schema = {
        "type": "object",
        "properties": {
            "folder": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "unread": {"type": "boolean", "default": True},
            "mode": {"type": "string", "default": "plain", "const": "plain"},
            "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": 50},
            "tags": {"type": "array", "default": [], "items": {"type": "string"}},
            "where": {"type": "object", "default": {"near": "Zürich"}},
        },
    }

    tree = schema_tree(schema)

    assert node(tree, "folder")["notes"] == ["default: null"]
    assert node(tree, "unread")["notes"] == ["default: true"]
    assert node(tree, "mode")["notes"] == ['default: "plain"', 'const: "plain"']
    assert node(tree, "limit")["notes"] == ["default: 10", "minimum: 1", "maximum: 50"]
    assert node(tree, "tags")["notes"] == ["default: []"]
    assert node(tree, "where")["notes"] == ['default: {"near": "Zürich"}']


def test_it_shows_enum_values_as_json() -> None:
    schema = {"properties": {"level": {"enum": ["low", None, 3, False]}, "fmt": {"type": "string", "format": "email"}}}

    tree = schema_tree(schema)

    assert node(tree, "level")["notes"] == ['one of: "low", null, 3, false']
    assert node(tree, "level")["type"] == "enum"
    assert node(tree, "fmt")["notes"] == ['format: "email"']


def test_it_caps_long_notes() -> None:
    schema = {"properties": {"text": {"type": "string", "default": "x" * 500}}}

    (note,) = node(schema_tree(schema), "text")["notes"]

    assert note.startswith('default: "xxx') and note.endswith("…") and len(note) <= len("default: ") + 120


def test_it_marks_required_properties_and_follows_local_references() -> None:
    schema = {
        "type": "object",
        "required": ["to"],
        "properties": {"to": {"type": "string"}, "file": {"$ref": "#/$defs/file"}},
        "$defs": {"file": {"type": "object", "properties": {"path": {"type": "string", "default": None}}}},
    }

    tree = schema_tree(schema)

    assert node(tree, "to")["required"] is True
    assert node(tree, "file")["type"] == "object (file)"
    assert node(node(tree, "file")["children"], "path")["notes"] == ["default: null"]
