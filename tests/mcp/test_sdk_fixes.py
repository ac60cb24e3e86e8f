"""The SDK fixes (`hostapp.mcp.sdk_fixes`) are installed for the release they were checked
against, and each returns and raises exactly as the SDK function it replaces."""

from __future__ import annotations

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


def test_another_release_keeps_the_sdks_own_function(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(methods, "validate_server_result", sdk_fixes._sdk_validate_server_result)
    monkeypatch.setattr(sdk_fixes, "version", lambda _: "99.0.0")

    assert sdk_fixes.apply() is False
    assert methods.validate_server_result is sdk_fixes._sdk_validate_server_result
