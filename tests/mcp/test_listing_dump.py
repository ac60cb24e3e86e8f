"""A listing's tools are turned into definitions field by field, exactly as a JSON dump of
the SDK's models would turn them (`_dump_listed` against `_dump`)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import types

from hostapp.mcp.connection import _dump, _dump_listed

# JSON values as a server's listing carries them (finite numbers: NaN and infinities are not
# JSON, and the catalog makes them null where it stores definitions).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
schemas = st.dictionaries(st.text(max_size=8), json_values, max_size=5).map(lambda d: {"type": "object", **d})
icons = st.lists(
    st.fixed_dictionaries(
        {"src": st.sampled_from(["https://example.com/i.png", "data:image/png;base64,AAAA"])},
        optional={"mimeType": st.just("image/png"), "sizes": st.lists(st.sampled_from(["16x16", "any"]), max_size=2)},
    ),
    max_size=2,
)
annotations = st.fixed_dictionaries(
    {},
    optional={
        "title": st.text(max_size=10),
        "readOnlyHint": st.booleans(),
        "destructiveHint": st.booleans(),
        "idempotentHint": st.booleans(),
        "openWorldHint": st.booleans(),
    },
)
tools = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=20), "inputSchema": schemas},
    optional={
        "title": st.text(max_size=20),
        "description": st.text(max_size=40),
        "outputSchema": schemas,
        "icons": icons,
        "annotations": annotations,
        "_meta": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        "execution": st.fixed_dictionaries({}, optional={"taskSupport": st.sampled_from(["forbidden", "optional"])}),
    },
)


def exactly(value: Any) -> str:
    """Equal as JSON, types included (1, 1.0 and true are three values)."""
    return json.dumps(value, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(tools)
def test_a_listed_tool_is_dumped_as_the_sdks_json_dump_dumps_it(raw: dict[str, Any]) -> None:
    tool = types.Tool.model_validate(raw)
    assert exactly(_dump_listed(tool)) == exactly(_dump(tool))


def test_a_tool_with_fields_the_model_does_not_know_is_dumped_whole() -> None:
    tool = types.Tool.model_validate({"name": "t", "inputSchema": {"type": "object"}, "unknown": 1})
    assert _dump_listed(tool) == _dump(tool)


def test_the_numbers_json_cannot_carry_are_left_to_the_catalog() -> None:
    """The fast dump takes free-form fields as parsed; a NaN stays a NaN (the catalog's
    `stored_definition` makes it null), where the model's JSON dump makes it null at once."""
    tool = types.Tool.model_validate({"name": "t", "inputSchema": {"type": "object", "maximum": float("nan")}})
    assert math.isnan(_dump_listed(tool)["inputSchema"]["maximum"])
    assert _dump(tool)["inputSchema"]["maximum"] is None
