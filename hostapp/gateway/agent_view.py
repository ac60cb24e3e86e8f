"""What one agent sees of the catalog: its view.

A view names the servers an agent may reach (none named: every server), the tools it is
shown (glob patterns over the tool's exposed or original name: none named means every
tool; an excluding pattern always wins) and the highest class it may see (read-only, write
or destructive). A tool outside the view does not exist for that agent: it is not listed,
and a call of it is refused (and on record as refused). The same object answers for the
agents' endpoint, the JSON API and the ledger (`hostapp.calls.actions.start_call` asks it).

Prompts follow the same patterns as tools (by their exposed or original name) and pass any
class limit, since they only read; resources and resource templates follow the servers.

A view of exactly one server may drop the prefix (`no_prefix`): its agent is given the
server's own tool names (hostapp/gateway/agent_catalog.py), as if it reached the server
itself, while every rule of the host still applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from hostapp.catalog.models import DESTRUCTIVE, READ_ONLY, WRITE

CLASS_RANK = {READ_ONLY: 0, WRITE: 1, DESTRUCTIVE: 2}
MAX_PATTERNS = 100
MAX_PATTERN_LENGTH = 200


class ViewError(ValueError):
    """A view that cannot be kept: the message says which part and why."""


@dataclass(frozen=True)
class AgentView:
    servers: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_class: str = ""  # "" : every class
    no_prefix: bool = False  # only with exactly one server: its own tool names

    def may_use(self, server: str) -> bool:
        return not self.servers or server in self.servers

    def sees(self, server: str, exposed_name: str, original_name: str, tool_class: str) -> bool:
        if not self.may_use(server):
            return False
        names = (exposed_name, original_name)
        if self.tools and not any(fnmatchcase(n, p) for p in self.tools for n in names):
            return False
        if any(fnmatchcase(n, p) for p in self.exclude for n in names):
            return False
        # An unknown class ranks above every other: a narrowed view does not show it.
        return not self.max_class or CLASS_RANK.get(tool_class, len(CLASS_RANK)) <= CLASS_RANK[self.max_class]

    def sees_tool(self, tool: Any) -> bool:
        """`sees` for a catalog Tool row (with its server). Patterns name the exposed or the
        original name, never an admin's rename: a rename can fall back (a server takes the
        name), and the list and the ledger must answer alike."""
        return self.sees(tool.server.name, tool.exposed_name, tool.original_name, tool.effective_class)

    def sees_prompt(self, prompt: Any) -> bool:
        """A prompt (with its server) by the patterns tool names follow; prompts only read,
        so a class limit leaves them."""
        return self.sees(prompt.server.name, prompt.exposed_name, prompt.original_name, READ_ONLY)

    @property
    def narrowed(self) -> bool:
        return bool(self.servers or self.tools or self.exclude or self.max_class)

    @property
    def unprefixed_server(self) -> str | None:
        """The one server whose own names this view shows, if it drops the prefix."""
        return self.servers[0] if self.no_prefix and len(self.servers) == 1 else None

    def describe(self) -> str:
        """In a few words, for lists and the closing line of a CLI command."""
        parts = [f"servers {', '.join(self.servers)}" if self.servers else "every server"]
        if self.tools:
            parts.append(f"tools {', '.join(self.tools)}")
        if self.exclude:
            parts.append(f"not {', '.join(self.exclude)}")
        if self.max_class:
            parts.append(f"up to {self.max_class.replace('_', '-')}")
        if self.no_prefix:
            parts.append("its own names, no prefix")
        return "; ".join(parts)

    def checked(self) -> AgentView:
        """This view, or ViewError when its parts do not fit together."""
        if self.no_prefix and len(self.servers) != 1:
            raise ViewError("no prefix: only a view of exactly one server can drop the prefix (give --servers NAME)")
        return self


@dataclass(frozen=True)
class AgentInfo:
    """An authenticated agent as the endpoint, the API and the ledger know it: its token's id,
    its name (the requester on record) and its view."""

    pk: int
    name: str
    view: AgentView = AgentView()

    def may_use(self, server: str) -> bool:
        return self.view.may_use(server)

    def sees(self, server: str, exposed_name: str, original_name: str, tool_class: str) -> bool:
        return self.view.sees(server, exposed_name, original_name, tool_class)

    def sees_tool(self, tool: Any) -> bool:
        return self.view.sees_tool(tool)


def patterns(values: list[str] | tuple[str, ...] | None, label: str) -> tuple[str, ...]:
    """Cleaned glob patterns (order kept, duplicates and blanks dropped), or ViewError."""
    out: list[str] = []
    for value in values or ():
        value = str(value).strip()
        if not value or value in out:
            continue
        if len(value) > MAX_PATTERN_LENGTH or any(c.isspace() or ord(c) < 32 for c in value):
            raise ViewError(f"{label}: {value[:40]!r} is not a tool name or pattern")
        out.append(value)
    if len(out) > MAX_PATTERNS:
        raise ViewError(f"{label}: at most {MAX_PATTERNS} patterns")
    return tuple(out)


def max_class(value: str | None) -> str:
    value = (value or "").strip().replace("-", "_")
    if value in ("", "all"):
        return ""
    if value not in CLASS_RANK:
        raise ViewError(f"max class: {value!r} is not one of read_only, write, destructive")
    return value
