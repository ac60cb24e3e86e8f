"""What a client does with a server's request for input that is the protocol's, not the host's."""

from __future__ import annotations

from typing import Any


def with_defaults(schema: dict[str, Any] | None, content: dict[str, Any]) -> dict[str, Any]:
    """An accepted form's `content`, with the requested schema's defaults for the fields it
    leaves out (SEP-1034: a client fills them in before it answers)."""
    filled = dict(content)
    for name, spec in ((schema or {}).get("properties") or {}).items():
        if name not in filled and isinstance(spec, dict) and "default" in spec:
            filled[name] = spec["default"]
    return filled
