"""What a reviewer reads of a quarantined tool: a new tool's definition as the tool page
shows a tool (description, annotations, argument tree), a changed one's fields side by side,
only those that changed, long JSON folded to the lines around each change."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from .schema import schema_tree

# The fields of a definition in the order a reviewer reads them; any other after these.
FIELD_ORDER = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta")
FIELD_LABELS = {
    "name": "Name",
    "title": "Title",
    "description": "Description",
    "inputSchema": "Input schema",
    "outputSchema": "Output schema",
    "annotations": "Annotations",
    "icons": "Icons",
    "_meta": "Metadata (_meta)",
}
CONTEXT = 2  # unchanged lines kept around each change of a long JSON field


@dataclass
class Row:
    kind: str  # equal, changed, removed, added, fold (n unchanged lines left out)
    old: str = ""
    new: str = ""


@dataclass
class FieldChange:
    name: str
    label: str
    kind: str  # added, removed, changed
    rows: list[Row] = field(default_factory=list)
    text: bool = False  # a text field: shown as paragraphs, not as JSON lines


def _lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines() or [""]
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def side_by_side(old: Any, new: Any, context: int | None = CONTEXT) -> list[Row]:
    """Rows of the two values' lines, matched; runs of more than `2 * context` equal lines
    are folded (`context=None`: every line)."""
    a, b = _lines(old), _lines(new)
    rows: list[Row] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            same = [Row("equal", a[i], b[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
            rows.extend(same)
        elif op == "replace":
            left, right = a[i1:i2], b[j1:j2]
            for k in range(max(len(left), len(right))):
                rows.append(Row("changed", left[k] if k < len(left) else "", right[k] if k < len(right) else ""))
        elif op == "delete":
            rows.extend(Row("removed", line, "") for line in a[i1:i2])
        else:
            rows.extend(Row("added", "", line) for line in b[j1:j2])
    return rows if context is None else _fold(rows, context)


def _fold(rows: list[Row], context: int) -> list[Row]:
    changed = [i for i, r in enumerate(rows) if r.kind != "equal"]
    keep = {j for i in changed for j in range(i - context, i + context + 1)}
    out: list[Row] = []
    skipped = 0
    for i, row in enumerate(rows):
        if i in keep or row.kind != "equal":
            if skipped:
                out.append(Row("fold", f"{skipped} unchanged line{'s' if skipped != 1 else ''}"))
                skipped = 0
            out.append(row)
        else:
            skipped += 1
    if skipped:
        out.append(Row("fold", f"{skipped} unchanged line{'s' if skipped != 1 else ''}"))
    return out


def changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldChange]:
    """The fields of `new` that differ from `old`, in reading order, each side by side."""
    old = old or {}
    names = [n for n in FIELD_ORDER if n in old or n in new]
    names += sorted((set(old) | set(new)) - set(FIELD_ORDER))
    out = []
    for name in names:
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        kind = "added" if name not in old else "removed" if name not in new else "changed"
        text = isinstance(before, str | None) and isinstance(after, str | None)
        out.append(
            FieldChange(
                name=name,
                label=FIELD_LABELS.get(name, name),
                kind=kind,
                rows=side_by_side(before, after, context=None if text else CONTEXT),
                text=text,
            )
        )
    return out


@dataclass
class Review:
    """What the review box of one quarantined tool shows."""

    new: bool
    changes: list[FieldChange]
    input_tree: list[Any]
    annotations: dict[str, Any]


def review(tool: Any) -> Review:
    """`tool`: a quarantined Tool (its definition now, and the one accepted before, if any)."""
    definition = tool.definition or {}
    is_new = not tool.pinned_definition
    return Review(
        new=is_new,
        changes=[] if is_new else changes(tool.pinned_definition, definition),
        input_tree=schema_tree(tool.input_schema) if is_new else [],
        annotations=definition.get("annotations") or {},
    )
