"""Make what a server says safe to show: capped, without invisible or direction controls.

A tool description is text written by whoever runs the server, and it reaches both people
(the catalog) and models (the agents' endpoint). Invisible characters can hide
instructions from the person while the model still reads them, and bidirectional
overrides can make text read differently from what it is. Both are removed; line breaks
and tabs are kept. Escaping for HTML is the templates' job, not this module's.
"""

from __future__ import annotations

import unicodedata
from typing import Any
from urllib.parse import urlsplit

DESCRIPTION_CAP = 4000
TITLE_CAP = 200

# Bidirectional embeddings, overrides and isolates, and the marks.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
# Zero-width and other invisible characters that are not format-neutral.
_INVISIBLE = set("\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad\u034f\u115f\u1160\u3164\uffa0")
_LINE_SEPARATORS = {"\u2028": "\n", "\u2029": "\n\n", "\x85": "\n"}


def clean_text(value: Any, cap: int = DESCRIPTION_CAP) -> str:
    """Strip controls and invisible characters, normalise line separators, cap the length."""
    if value is None:
        return ""
    text = str(value)
    out: list[str] = []
    for ch in text:
        if ch in _LINE_SEPARATORS:
            out.append(_LINE_SEPARATORS[ch])
            continue
        if ch in ("\n", "\t"):
            out.append(ch)
            continue
        if ch in _BIDI or ch in _INVISIBLE:
            continue
        category = unicodedata.category(ch)
        # Cc: control characters; Cf: other format characters (tags, joiners...);
        # Co/Cs/Cn: private use, surrogates, unassigned.
        if category in ("Cc", "Cf", "Co", "Cs", "Cn"):
            continue
        out.append(ch)
    cleaned = "".join(out).strip()
    if len(cleaned) > cap:
        cleaned = cleaned[: cap - 1].rstrip() + "…"
    return cleaned


def removed_characters(value: Any) -> int:
    """How many characters :func:`clean_text` drops (before capping), for a warning."""
    if value is None:
        return 0
    text = str(value)
    kept = clean_text(text, cap=len(text) + 1)
    return max(0, len(text.strip()) - len(kept))


def safe_icons(icons: Any, limit: int = 8) -> list[dict[str, Any]]:
    """Only `https:` and `data:image/*` icons survive (never javascript:, file:, http:)."""
    safe: list[dict[str, Any]] = []
    if not isinstance(icons, list):
        return safe
    for icon in icons:
        if not isinstance(icon, dict):
            continue
        src = icon.get("src")
        if not isinstance(src, str) or len(src) > 100_000:
            continue
        scheme = urlsplit(src).scheme.lower()
        if scheme == "https" or (
            scheme == "data" and src[5:].lower().startswith("image/") and "svg" not in src[5:40].lower()
        ):
            entry = {"src": src}
            for key in ("mimeType", "sizes", "theme"):
                if key in icon:
                    entry[key] = icon[key]
            safe.append(entry)
        if len(safe) >= limit:
            break
    return safe
