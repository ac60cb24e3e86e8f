"""The SDK fixes (`hostapp.mcp.sdk_fixes`) are installed for the release they were checked
against, and each returns and raises exactly as the SDK function it replaces."""

from __future__ import annotations

import copy
import json
from importlib.metadata import version
from typing import Any

import mcp_types.methods as methods
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hostapp.mcp import sdk_fixes

from .test_listing_dump import json_values, tools

VERSIONS = sorted(methods.KNOWN_PROTOCOL_VERSIONS)
# Results the client checks, a listing most often (what a refresh receives, thousands of tools), a
# call's result, the handshake's.
METHODS = ["tools/list"] * 4 + ["tools/call", "initialize", "resources/list", "prompts/list"]


def outcome(validate: Any, method: str, version: str, data: Any) -> Any:
    """What a validation did: None, or the error it raised (its type, and for a
    ValidationError the errors it lists)."""
    try:
        assert validate(method, version, data) is None
    except ValidationError as exc:
        return ("ValidationError", exc.errors(include_url=False))
    except (ValueError, KeyError) as exc:
        return (type(exc).__name__, str(exc))
    return None


def test_the_fixes_are_installed_for_the_release_they_were_checked_against() -> None:
    """An SDK upgrade fails here until someone checks the fixes against the new release."""
    assert version("mcp-types") in sdk_fixes.CHECKED
    assert sdk_fixes.applied
    assert methods.validate_server_result is sdk_fixes.validate_server_result


# Results of the right shape (for the 2025 revisions, and with the fields the 2026 one
# requires), of the wrong shape, and anything at all.
listings = st.builds(
    lambda listing, modern: {**listing, **modern},
    st.fixed_dictionaries(
        {"tools": st.lists(tools, max_size=4)},
        optional={
            "nextCursor": st.text(max_size=5),
            "_meta": st.dictionaries(st.text(max_size=5), json_values, max_size=2),
        },
    ),
    st.sampled_from([{}, {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}]),
)
broken = listings.flatmap(
    lambda listing: st.sampled_from(["tools", "name", "inputSchema", "annotations", "ttlMs"]).map(
        lambda part: _break(listing, part)
    )
)


def _break(listing: dict[str, Any], part: str) -> dict[str, Any]:
    listing = {**listing, "tools": [dict(t) for t in listing["tools"]]}
    if part == "tools":
        listing["tools"] = {"not": "a list"}
    elif listing["tools"]:
        tool = listing["tools"][0]
        if part == "name":
            tool.pop("name")
        elif part == "inputSchema":
            tool["inputSchema"] = "not an object"
        elif part == "annotations":
            tool["annotations"] = {"readOnlyHint": "sometimes"}
    if part == "ttlMs":
        listing["ttlMs"] = "soon"
    return listing


results = listings | listings | broken | st.dictionaries(st.text(max_size=8), json_values, max_size=4) | json_values


@settings(max_examples=400, deadline=None)
@given(method=st.sampled_from(METHODS), version=st.sampled_from(VERSIONS), data=results)
def test_validation_ends_as_the_sdks_does(method: str, version: str, data: Any) -> None:
    sdk = outcome(sdk_fixes._sdk_validate_server_result, method, version, data)

    assert outcome(sdk_fixes.validate_server_result, method, version, data) == sdk


@pytest.mark.parametrize(
    ("method", "version", "error"),
    [("tools/list", "1999-01-01", "ValueError"), ("no/such/method", VERSIONS[-1], "KeyError")],
)
def test_an_unknown_revision_or_method_raises_as_the_sdk_does(method: str, version: str, error: str) -> None:
    sdk = outcome(sdk_fixes._sdk_validate_server_result, method, version, {"tools": []})

    assert sdk[0] == error
    assert outcome(sdk_fixes.validate_server_result, method, version, {"tools": []}) == sdk


def test_another_release_keeps_the_sdks_own_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    import mcp.client.session
    import mcp.client.streamable_http
    import mcp_types

    monkeypatch.setattr(sdk_fixes, "version", lambda _: "99.0.0")
    try:
        sdk_fixes.remove()

        assert sdk_fixes.apply() is False
        assert methods.validate_server_result is sdk_fixes._sdk_validate_server_result
        assert mcp_types.jsonrpc_message_adapter is sdk_fixes._sdk_message_adapter
        assert mcp.client.streamable_http.jsonrpc_message_adapter is sdk_fixes._sdk_message_adapter
        assert mcp.client.session.x_mcp_header_map is sdk_fixes._sdk_x_mcp_header_map
        assert mcp.client.session.find_invalid_x_mcp_header is sdk_fixes._sdk_find_invalid_x_mcp_header
    finally:
        monkeypatch.undo()
        assert sdk_fixes.apply() is True


# --- reading a message --------------------------------------------------------------------

ids = st.integers() | st.text(max_size=4) | st.none() | st.floats(allow_nan=False) | st.booleans()
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": ids,
        "result": st.dictionaries(st.text(max_size=6), json_values, max_size=3) | json_values,
        "method": st.sampled_from(["tools/list", "notifications/progress"]) | st.integers(),
        "params": st.dictionaries(st.text(max_size=6), json_values, max_size=2) | st.none() | st.integers(),
        "error": st.fixed_dictionaries({"code": st.integers(), "message": st.text(max_size=6)}) | json_values,
        "extra": json_values,
    },
)
# Mostly well-formed results (what the fast path reads), then any envelope, then any JSON.
messages = (
    st.builds(
        lambda i, result: {"jsonrpc": "2.0", "id": i, "result": result},
        st.integers() | st.text(max_size=4),
        st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    )
    | envelopes
    | json_values
)


def read(adapter: Any, data: bytes) -> Any:
    """What reading a message gave: the envelope's type, its fields and which were set; or
    the errors raised."""
    try:
        message = adapter.validate_json(data, by_name=False)
    except ValidationError as exc:
        return ("ValidationError", exc.errors(include_url=False))
    # As JSON text, so that a NaN in both equals itself.
    return (type(message), json.dumps(message.model_dump()), message.model_fields_set, message.model_extra)


@settings(max_examples=500, deadline=None)
@given(message=messages, spaced=st.booleans())
def test_a_message_reads_as_the_sdk_reads_it(message: Any, spaced: bool) -> None:
    data = json.dumps(message, separators=(", ", ": ") if spaced else (",", ":")).encode()

    assert read(sdk_fixes.message_adapter, data) == read(sdk_fixes._sdk_message_adapter, data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{not json",
        b'{"jsonrpc": "2.0", "id": 1, "result": {}',
        b'{"jsonrpc": "2.0", "id": 1, "result": {}} trailing',
        b'{"jsonrpc": "2.0", "id": 1, "result": {}, "result": {"a": 1}}',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"n": NaN}}',
        b'{"jsonrpc": "2.0", "id": 1.0, "result": {}}',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"s": "\\ud800"}}',
        '{"jsonrpc": "2.0", "id": "é", "result": {"t": "ß"}}'.encode("utf-16"),
        b'{"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "both"}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}}',
        b'{"jsonrpc": "2.0", "id": 1, "res\\u0075lt": {"escaped": "key"}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"as": "str"}}',
        bytearray(b'{"jsonrpc": "2.0", "id": 1, "result": {"as": "bytearray"}}'),
    ],
    ids=[
        "empty", "not-json", "cut-short", "trailing", "duplicate-key", "nan", "float-id", "lone-surrogate",
        "utf-16", "result-and-error", "result-and-method", "escaped-key", "str", "bytearray",
    ],
)  # fmt: skip
def test_an_odd_message_reads_as_the_sdk_reads_it(data: bytes | str) -> None:
    assert read(sdk_fixes.message_adapter, data) == read(sdk_fixes._sdk_message_adapter, data)


def test_the_adapter_copies_and_answers_as_the_sdks_for_what_it_does_not_fix() -> None:
    assert copy.copy(sdk_fixes.message_adapter).validate_python is not None
    assert copy.deepcopy(sdk_fixes.message_adapter).core_schema == sdk_fixes._sdk_message_adapter.core_schema
    assert sdk_fixes.message_adapter.validate_python is not None
    assert sdk_fixes.message_adapter.json_schema() == sdk_fixes._sdk_message_adapter.json_schema()


def test_the_transports_read_through_the_fixed_adapter() -> None:
    import mcp.client.streamable_http
    import mcp_types

    assert mcp_types.jsonrpc_message_adapter is sdk_fixes.message_adapter
    assert mcp.client.streamable_http.jsonrpc_message_adapter is sdk_fixes.message_adapter


# --- x-mcp-header annotations -----------------------------------------------------------------

header_key = st.sampled_from(["x-mcp-header", "properties", "items", "anyOf", "type", "$defs", "enum", "X-MCP-Header"])
header_values = st.sampled_from(["Region", "region", "bad token", "", 3, None, "string", "integer", "object"])
header_schemas = st.recursive(
    header_values | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(header_key | st.text(max_size=3), inner, max_size=4),
    max_leaves=25,
)


def header_outcome(find: Any, mapping: Any, schema: Any) -> Any:
    reason = find(schema)
    return (reason, None if reason is not None else mapping(schema))


@settings(max_examples=400)
@given(schema=header_schemas | json_values)
def test_header_annotations_are_found_as_the_sdk_finds_them(schema: Any) -> None:
    sdk = header_outcome(sdk_fixes._sdk_find_invalid_x_mcp_header, sdk_fixes._sdk_x_mcp_header_map, schema)
    assert header_outcome(sdk_fixes.find_invalid_x_mcp_header, sdk_fixes.x_mcp_header_map, schema) == sdk


class _Schema(dict):  # type: ignore[type-arg]
    """Not a plain dict: the fix leaves it to the SDK's walk."""


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
        {"type": "object", "properties": {"region": {"type": "object", "x-mcp-header": "Region"}}},
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}}},
        {"type": "object", "anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},
        {"type": "object", "properties": _Schema(region=_Schema({"type": "string", "x-mcp-header": "Region"}))},
        {"type": "object", "enum": [{"x-mcp-header": "data, not a schema"}]},
        {"type": "object", "x-mcp-header": "Root"},
        {"type": "object", "default": [[[[[[[[]]]]]]]]},
    ],
)  # fmt: skip
def test_odd_header_annotations_are_found_as_the_sdk_finds_them(schema: Any) -> None:
    sdk = header_outcome(sdk_fixes._sdk_find_invalid_x_mcp_header, sdk_fixes._sdk_x_mcp_header_map, schema)
    assert header_outcome(sdk_fixes.find_invalid_x_mcp_header, sdk_fixes.x_mcp_header_map, schema) == sdk


def test_a_schema_deeper_than_pythons_stack_goes_to_the_sdks_walk() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    schema = {"type": "object", "default": deep}
    assert sdk_fixes.find_invalid_x_mcp_header(schema) is None
    assert sdk_fixes.x_mcp_header_map(schema) == {}


def test_the_session_finds_header_annotations_through_the_fix() -> None:
    import mcp.client.session

    assert mcp.client.session.find_invalid_x_mcp_header is sdk_fixes.find_invalid_x_mcp_header
    assert mcp.client.session.x_mcp_header_map is sdk_fixes.x_mcp_header_map
