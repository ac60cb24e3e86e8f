"""`stored_definition`: one encoding of a definition gives its pin and its stored text.

The pin must stay the hash `definition_hash` has always given (every stored pin is one), and
the text must be the stored definition's JSON, whatever a listing holds.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hostapp.catalog.actions import _same_json
from hostapp.catalog.models import PINNED_KEYS, definition_hash, storable, stored_definition

# Text with what a listing can hold: any code point but lone surrogates (JSON from a server
# decodes to valid strings), NUL and the other control characters included.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from([*PINNED_KEYS, "icons", "_meta", "execution"]) | TEXT
DEFINITIONS = st.dictionaries(KEYS, JSON, max_size=9)


@settings(max_examples=400, deadline=None)
@given(DEFINITIONS)
def test_the_pin_is_definition_hash_and_the_text_is_the_stored_definition(definition: dict[str, Any]) -> None:
    stored = stored_definition(definition)
    clean = storable(definition)
    assert _same_json(stored.definition, clean)
    assert stored.digest == definition_hash(clean)
    assert _same_json(json.loads(stored.text), clean)
    # Without the text (SQLite writes its own): the same definition and pin.
    without = stored_definition(definition, with_text=False)
    assert without.text is None
    assert _same_json(without.definition, clean)
    assert without.digest == stored.digest


@settings(max_examples=200, deadline=None)
@given(DEFINITIONS)
def test_a_clean_definition_is_returned_as_it_is(definition: dict[str, Any]) -> None:
    """No copy when there is nothing to change (nearly every listing)."""
    clean = storable(definition)
    if _same_json(clean, definition) and "\\u0000" not in json.dumps(definition):
        assert stored_definition(definition).definition is definition


def test_the_pin_of_a_known_definition_stays_what_it_was() -> None:
    """A pin stored by an earlier release: the hash of the canonical JSON of the pinned keys."""
    definition = {
        "name": "read",
        "description": "Read a file \u00e9",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "icons": [{"src": "https://example.com/i.png"}],
    }
    stored = stored_definition(definition)
    assert stored.digest == "9a540d3292be7bd9180ad5632a271c27c13dacf0506b0d8148c5afb27f60ecea"
    assert json.loads(stored.text) == definition


def test_nan_and_nul_are_cleaned_before_the_pin_and_the_text() -> None:
    definition = {"name": "x\x00y", "inputSchema": {"type": "object", "default": math.nan}, "_meta": {"k\x00": 1}}
    stored = stored_definition(definition)
    assert stored.definition == {"name": "xy", "inputSchema": {"type": "object", "default": None}, "_meta": {"k": 1}}
    assert stored.digest == definition_hash(stored.definition)
    assert json.loads(stored.text) == stored.definition
