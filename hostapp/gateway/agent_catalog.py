"""What agents are given of the catalog: the active tools as the host presents them, each
agent's by its view, in memory.

Every tool has two faces. In a prefixed view (the default) it is listed under an admin's
rename, else its exposed name `<server>__<tool>`. In a view of one server without the prefix
it is listed under the rename, else the server's own name (sanitized only where it breaks
the model-safe rule: `hostapp.catalog.naming.own_names`). An admin's description replaces the
server's in both. Behind either face the call is the catalog's tool (its exposed name is the
one the ledger and the policy know), so approvals, the outbox and the record still apply.

A rename is checked for clashes when it is given (`hostapp.catalog.actions.set_override`);
a name a server takes later (a new tool) wins over it here, and the renamed tool falls back
to its own name until someone picks another.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async

from hostapp.calls.models import Call
from hostapp.calls.policy import all_rules, decide
from hostapp.catalog.actions import applied_annotations
from hostapp.catalog.models import Tool
from hostapp.catalog.naming import own_names

from .agent_offers import EMPTY_OFFERS, Offers, load_offers
from .agent_view import AgentInfo

logger = logging.getLogger(__name__)

# How long the in-memory tool list is trusted without a change event (a safety net).
CATALOG_TTL = 30.0
# A call that is not finished within the wait answers with this instead of the tool's own
# output; every advertised output schema admits it.
DEFERRED_SCHEMA = {
    "type": "object",
    "properties": {"call_id": {"type": "integer"}, "status": {"type": "string"}},
    "required": ["call_id", "status"],
}
# What a definition costs a model, roughly: JSON text runs about four bytes a token with
# the tokenizers in use. An estimate, and labelled as one wherever it is shown.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class Entry:
    server: str
    tool: types.Tool  # as a prefixed view lists it
    original: str = ""
    tool_class: str = ""
    blocked: bool = False  # a rule blocks it: not listed (a call of it is refused, on record)
    exposed: str = ""  # the catalog's name: what the ledger records and rules name ("": tool.name)
    own: types.Tool | None = None  # as a view of its server without the prefix lists it
    digest: str = ""  # of the definition as listed, but for the name (what a listing change compares)

    @property
    def exposed_name(self) -> str:
        return self.exposed or self.tool.name

    def visible_to(self, agent: AgentInfo) -> bool:
        """Listed to `agent`: in its view, and not blocked by the policy."""
        # As the ledger asks (`AgentView.sees_tool`): by the exposed and the original name.
        return not self.blocked and agent.sees(self.server, self.exposed_name, self.original, self.tool_class)

    def face(self, agent: AgentInfo) -> types.Tool:
        """The definition `agent` is given."""
        return self.own if self.own is not None and agent.view.unprefixed_server == self.server else self.tool


@dataclass(frozen=True)
class Catalog:
    """The active catalog: by name in a prefixed view, and by server and name without one."""

    tools: dict[str, Entry]  # in name order
    own: dict[str, dict[str, Entry]]  # each in name order
    offers: Offers = EMPTY_OFFERS  # prompts, resources, templates (agent_offers.py)

    def _names(self, agent: AgentInfo) -> dict[str, Entry]:
        """Every tool by the name `agent` calls it (in its view or not)."""
        server = agent.view.unprefixed_server
        return self.own.get(server, {}) if server is not None else self.tools

    def find(self, agent: AgentInfo, name: str) -> Entry | None:
        """The tool `agent` calls `name`, if it is in its view (else None: to it, no such tool)."""
        entry = self.find_any(agent, name)
        return entry if entry is not None and entry.visible_to(agent) else None

    def find_any(self, agent: AgentInfo, name: str) -> Entry | None:
        """The tool `name` names for `agent`, in its view or not (a call of one outside it is
        refused on record)."""
        return self._names(agent).get(name)

    def listed(self, agent: AgentInfo) -> list[types.Tool]:
        """The tools `agent` is given by tools/list (and `mcp token show` shows), in name order."""
        return [e.face(agent) for e in self._names(agent).values() if e.visible_to(agent)]

    def fingerprint(self, agent: AgentInfo) -> int:
        """What `agent` is listed, to tell a change of its list from a change elsewhere."""
        return hash(tuple((name, e.digest) for name, e in self._names(agent).items() if e.visible_to(agent)))


@dataclass(frozen=True)
class Cost:
    name: str
    bytes: int

    @property
    def tokens(self) -> int:
        return -(-self.bytes // BYTES_PER_TOKEN)


def costs(tools: list[types.Tool]) -> list[Cost]:
    """Each definition's size as an agent receives it in tools/list (compact JSON, UTF-8)."""
    out = []
    for tool in tools:
        wire = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
        out.append(Cost(tool.name, len(json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode())))
    return out


def _with_deferred(schema: dict[str, Any]) -> dict[str, Any]:
    """The tool's own output schema, or the "not finished yet" answer naming the call.

    Definitions move to the root, where the original's `#/$defs/...` references point.
    """
    inner = dict(schema)
    wrapper: dict[str, Any] = {"type": "object"}
    for key in ("$defs", "definitions"):
        if key in inner:
            wrapper[key] = inner.pop(key)
    wrapper["anyOf"] = [inner, DEFERRED_SCHEMA]
    return wrapper


def _definition(t: Tool, name: str) -> types.Tool:
    applied = applied_annotations(t)
    annotations = types.ToolAnnotations(
        title=t.title or None,
        read_only_hint=applied["readOnlyHint"],
        destructive_hint=applied["destructiveHint"],
        idempotent_hint=applied["idempotentHint"],
        open_world_hint=applied["openWorldHint"],
    )
    fields: dict[str, Any] = {
        "name": name,
        "title": t.title or None,
        "description": t.agent_description or t.description or None,
        "input_schema": t.input_schema or {"type": "object"},
        "annotations": annotations,
    }
    if t.output_schema:
        fields["output_schema"] = _with_deferred(t.output_schema)
    meta = t.definition.get("_meta")
    if isinstance(meta, dict) and meta:
        fields["_meta"] = meta  # as the server gave it: an MCP App's `ui` points at its resource
    return types.Tool(**fields)


def ui_uri(t: Tool) -> str:
    """The `ui://` resource a tool's UI metadata names, if any (current and older keys)."""
    meta = t.definition.get("_meta")
    if not isinstance(meta, dict):
        return ""
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, dict) else meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) and uri.startswith("ui://") else ""


def _prefixed_names(tools: list[Tool]) -> dict[int, str]:
    """Each tool's name in a prefixed view: its rename where no exposed name (nor an earlier
    rename) has it, else its exposed name."""
    taken = {t.exposed_name for t in tools}
    names = {}
    for t in tools:
        name = t.exposed_name
        if t.agent_name and t.agent_name not in taken:
            name = t.agent_name
            taken.add(name)
        elif t.agent_name:
            logger.warning("%s keeps its name: its rename %r is taken by another tool", t.exposed_name, t.agent_name)
        names[t.pk] = name
    return names


def _own_names(tools: list[Tool]) -> dict[int, str]:
    """Each tool's name in a view of its server without the prefix (see the module's doc)."""
    out: dict[int, str] = {}
    by_server: dict[int, list[Tool]] = defaultdict(list)
    for t in tools:
        by_server[t.server_id].append(t)
    for members in by_server.values():
        plain = own_names(t.original_name for t in members)
        # The server's own names first: a rename never takes one of them.
        taken = {plain[t.original_name].name for t in members if not t.agent_name}
        for t in sorted(members, key=lambda t: not t.agent_name):
            name = plain[t.original_name].name
            if t.agent_name and t.agent_name not in taken:
                name = t.agent_name
            elif name in taken and t.agent_name:
                logger.warning("%s keeps its exposed name without the prefix: its names are taken", t.exposed_name)
                name = t.exposed_name
            taken.add(name)
            out[t.pk] = name
    return out


def _digest(tool: types.Tool) -> str:
    return hashlib.sha256(tool.model_dump_json(exclude={"name"}).encode()).hexdigest()


def load_catalog() -> Catalog:
    tools = list(
        Tool.objects.filter(status=Tool.ACTIVE, server__enabled=True).select_related("server").order_by("exposed_name")
    )
    rules = all_rules()
    prefixed, own = _prefixed_names(tools), _own_names(tools)
    by_name: dict[str, Entry] = {}
    by_server: dict[str, dict[str, Entry]] = defaultdict(dict)
    for t in tools:
        listed = _definition(t, prefixed[t.pk])
        entry = Entry(
            server=t.server.name,
            tool=listed,
            original=t.original_name,
            tool_class=t.effective_class,
            blocked=decide(t, rules).kind == Call.REFUSE,
            exposed=t.exposed_name,
            own=listed.model_copy(update={"name": own[t.pk]}),
            digest=_digest(listed),
        )
        by_name[listed.name] = entry
        by_server[t.server.name][own[t.pk]] = entry
    ui_uris: dict[str, set[str]] = defaultdict(set)
    for t in tools:
        if uri := ui_uri(t):
            ui_uris[t.server.name].add(uri)
    # Each in name order: the order lists are given in, kept from one load to the next.
    return Catalog(
        dict(sorted(by_name.items())),
        {s: dict(sorted(e.items())) for s, e in by_server.items()},
        load_offers(ui_uris),
    )


class CatalogCache:
    """The active catalog in memory; one database read per change, not per request.

    An invalidated catalog is reloaded on its next use; until then synchronous readers
    (`peek`) keep the last one loaded."""

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self._fresh_until = 0.0
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        self._fresh_until = 0.0

    def peek(self) -> Catalog | None:
        """The last catalog loaded, without waiting for a reload (None: none yet)."""
        return self._catalog

    def keep(self, catalog: Catalog) -> None:
        """Serve `catalog` until the next change (tests, and a catalog loaded elsewhere)."""
        self._catalog, self._fresh_until = catalog, time.monotonic() + CATALOG_TTL

    async def get(self) -> Catalog:
        catalog = self._catalog
        if catalog is not None and time.monotonic() < self._fresh_until:
            return catalog
        async with self._lock:
            if self._catalog is None or time.monotonic() >= self._fresh_until:
                self.keep(await sync_to_async(load_catalog, thread_sensitive=False)())
            assert self._catalog is not None
            return self._catalog
