"""JSON Schemas as readable trees for the tool page (no script, just nested lists)."""

from __future__ import annotations

import json
from typing import Any

from hostapp.mcp.sanitize import clean_text

MAX_DEPTH = 8
MAX_NODES = 400


def _resolve(schema: Any, root: dict[str, Any], seen: frozenset[str]) -> tuple[dict[str, Any], str, frozenset[str]]:
    """Follow a local `$ref` (#/$defs/X, #/definitions/X); returns (schema, ref name, seen)."""
    if not isinstance(schema, dict):
        return {}, "", seen
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema, "", seen
    if ref in seen:
        return {"description": f"(recursive reference to {ref})"}, ref, seen
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        return {"description": f"(unresolved reference {ref})"}, ref, seen
    merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return merged, ref.rsplit("/", 1)[-1], seen | {ref}


def _json(value: Any) -> str:
    """A schema's value as JSON (`null`, `true`, `"x"`), the way the schema itself says it."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _types(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(str(x) for x in t)
    if isinstance(t, str):
        return t
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    if "enum" in schema:
        return "enum"
    if "const" in schema:
        return "const"
    return ""


def schema_tree(schema: Any) -> list[dict[str, Any]]:
    """The top-level properties of `schema` as nodes (name, type, required, notes, children)."""
    if not isinstance(schema, dict):
        return []
    budget = [MAX_NODES]
    return _children(schema, schema, 0, frozenset(), budget)


def _children(
    schema: dict[str, Any], root: dict[str, Any], depth: int, seen: frozenset[str], budget: list[int]
) -> list[dict[str, Any]]:
    schema, _, seen = _resolve(schema, root, seen)
    nodes: list[dict[str, Any]] = []
    required = set(schema.get("required") or [])
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            nodes.append(_node(str(name), sub, root, depth, seen, budget, required=name in required))
    items = schema.get("items")
    if isinstance(items, dict):
        nodes.append(_node("[items]", items, root, depth, seen, budget))
    for combinator in ("oneOf", "anyOf", "allOf"):
        options = schema.get(combinator)
        if isinstance(options, list):
            for i, option in enumerate(options, 1):
                nodes.append(_node(f"{combinator} #{i}", option, root, depth, seen, budget))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        nodes.append(_node("[any other key]", extra, root, depth, seen, budget))
    return nodes


def _node(
    name: str,
    sub: Any,
    root: dict[str, Any],
    depth: int,
    seen: frozenset[str],
    budget: list[int],
    required: bool = False,
) -> dict[str, Any]:
    budget[0] -= 1
    resolved, ref_name, inner_seen = _resolve(sub, root, seen)
    node: dict[str, Any] = {
        "name": name,
        "type": _types(resolved) + (f" ({ref_name})" if ref_name else ""),
        "required": required,
        "description": clean_text(resolved.get("description") or resolved.get("title") or "", 500),
        "notes": [],
        "children": [],
    }
    for key in (
        "format",
        "default",
        "const",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
    ):
        if key in resolved:
            node["notes"].append(f"{key}: {clean_text(_json(resolved[key]), 120)}")
    if isinstance(resolved.get("enum"), list):
        node["notes"].append("one of: " + clean_text(", ".join(_json(v) for v in resolved["enum"][:30]), 400))
    if depth + 1 < MAX_DEPTH and budget[0] > 0:
        node["children"] = _children(resolved, root, depth + 1, inner_seen, budget)
    return node
