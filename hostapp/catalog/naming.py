"""Exposed tool names: `<server>__<tool>`, valid for every model API, unique and stable.

Model APIs accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``. Every tool is exposed as
``<server>__<tool>`` with the tool part sanitized to that alphabet; a name that would be
longer than 64 characters is truncated and given a short hash of the original name; two
tools whose sanitized names collide keep the one that needed no change and give the
others a hash suffix. Every choice depends only on the set of names, never on order, so
a refresh that finds the same tools exposes them under the same names.

An agent's view limited to one server may drop the prefix (`own_names`): the same rules,
with no prefix. An admin may rename a tool for agents (`check_rename`): the new name keeps
to the same alphabet and length.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

MAX_LEN = 64
SEPARATOR = "__"
EXPOSED_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_BAD = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Exposed:
    name: str
    warning: str = ""


def _digest(original: str, length: int) -> str:
    return hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _fit(prefix: str, body: str, original: str, force_hash: bool, hash_len: int = 8) -> str:
    """`prefix + body`, truncated with a hash of `original` when too long or forced."""
    if not force_hash and len(prefix) + len(body) <= MAX_LEN:
        return prefix + body
    suffix = "_" + _digest(original, hash_len)
    room = MAX_LEN - len(prefix) - len(suffix)
    return prefix + body[: max(0, room)] + suffix


def expose_names(server: str, originals: Iterable[str]) -> dict[str, Exposed]:
    """Map each original tool name of `server` to its exposed name (and a warning, if any)."""
    return _names(server + SEPARATOR, originals)


def own_names(originals: Iterable[str]) -> dict[str, Exposed]:
    """Each original name of one server as an unprefixed view shows it: itself where it is
    model-safe, else sanitized by the same rules as an exposed name (without the prefix)."""
    return _names("", originals)


def _names(prefix: str, originals: Iterable[str]) -> dict[str, Exposed]:
    names = sorted(set(originals))
    sanitized = {n: _BAD.sub("_", n) or "_" for n in names}
    first: dict[str, str] = {n: _fit(prefix, sanitized[n], n, force_hash=False) for n in names}
    groups: dict[str, list[str]] = defaultdict(list)
    for n in names:
        groups[first[n]].append(n)
    result: dict[str, Exposed] = {}
    taken: set[str] = set()
    for candidate, members in groups.items():
        if len(members) == 1:
            n = members[0]
            warning = ""
            if sanitized[n] != n:
                warning = f"the name {n!r} was changed to fit [A-Za-z0-9_-]"
            if len(prefix) + len(sanitized[n]) > MAX_LEN:
                warning = (warning + "; " if warning else "") + "the name was shortened to 64 characters"
            result[n] = Exposed(candidate, warning)
            taken.add(candidate)
            continue
        # A collision after sanitizing: a member that needed no change keeps the name.
        keeper = next((n for n in members if sanitized[n] == n and len(prefix) + len(n) <= MAX_LEN), None)
        for n in members:
            if n == keeper:
                result[n] = Exposed(candidate, "")
                taken.add(candidate)
                continue
            others = ", ".join(repr(m) for m in members if m != n)
            result[n] = Exposed(
                _fit(prefix, sanitized[n], n, force_hash=True),
                f"the name {n!r} collides with {others} after sanitizing; a suffix tells them apart",
            )
    # Hash suffixes could in theory meet each other or a clean name: lengthen until unique.
    seen: dict[str, str] = {}
    # Names that needed no suffix are placed first, so a hash suffix never displaces them.
    for n in sorted(names, key=lambda n: result[n].name != prefix + sanitized[n]):
        exposed = result[n].name
        length = 8
        while exposed in seen and seen[exposed] != n:
            length += 4
            exposed = _fit(prefix, sanitized[n], n, force_hash=True, hash_len=length)
        if exposed != result[n].name:
            result[n] = Exposed(exposed, result[n].warning or "suffix lengthened to stay unique")
        seen[exposed] = n
    return result


def split_exposed(exposed: str) -> tuple[str, str]:
    """(server, rest) of an exposed name; the rest is not the original name in general."""
    server, sep, rest = exposed.partition(SEPARATOR)
    if not sep:
        raise ValueError(f"{exposed!r} is not a namespaced tool name")
    return server, rest


# Names an admin may not give a tool: the host's own tools are named `patchbay__...`.
RESERVED_PREFIX = "patchbay" + SEPARATOR


def check_rename(name: str) -> str:
    """`name` as a tool's new name for agents, or ValueError saying why it cannot be."""
    name = name.strip()
    if not EXPOSED_RE.match(name):
        raise ValueError(f"{name[:80]!r} is not a model-safe name: 1 to 64 of A-Z, a-z, 0-9, '_' and '-'")
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(f"names starting with {RESERVED_PREFIX} are the host's own")
    return name
