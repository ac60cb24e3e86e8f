"""JSON values as every database's JSON column keeps them."""

from __future__ import annotations

import math
from typing import Any


def storable(value: Any) -> Any:
    """`value` as every database's JSON column keeps it: NaN and infinities, which are not
    JSON (a server's JSON parser may accept them all the same), become null, as a JSON dump
    of the SDK's models makes them; NUL characters, which PostgreSQL's jsonb refuses, are
    removed from strings and keys."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value
