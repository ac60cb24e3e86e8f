"""Who hears that a list changed (tools, prompts, resources): each connected agent, only
when its own list did.

Agents listen in two ways. A 2025-era session is told on its long-lived connection
(`notifications/tools/list_changed`); a 2026-07-28 client holds a `subscriptions/listen`
stream, fed by the bus the SDK's `ListenHandler` subscribes to. Both are kept here by agent,
so that an edit of one agent's view, or a catalog change outside it, tells nobody else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

import anyio.lowlevel
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ServerEvent, ToolsListChanged

from .agent_view import AgentInfo

logger = logging.getLogger(__name__)

# The agent of the request being served (set around the SDK's app, and around the listen
# handler, for hooks that get no request: the SDK's schema lookup, the bus's subscribe).
current_agent: ContextVar[AgentInfo | None] = ContextVar("patchbay_agent", default=None)

# What a list change tells: the listen stream's event, and the 2025-era session's method.
TOOLS, PROMPTS, RESOURCES = "tools", "prompts", "resources"
LISTS: dict[str, tuple[ServerEvent, str]] = {
    TOOLS: (ToolsListChanged(), "send_tool_list_changed"),
    PROMPTS: (PromptsListChanged(), "send_prompt_list_changed"),
    RESOURCES: (ResourcesListChanged(), "send_resource_list_changed"),
}

# 2025-era sessions not seen for this long are no longer told of changes.
LEGACY_SESSION_IDLE = 3600.0
LEGACY_SESSIONS_MAX = 5000


class AgentBus:
    """A `SubscriptionBus` (the SDK's protocol) whose listeners belong to agents: a listen
    stream subscribes while its request's agent is `current_agent`, and `publish_to` reaches
    only the streams of the agents named."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[int | None, Callable[[ServerEvent], None]]] = {}

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        agent = current_agent.get()
        key = object()
        self._listeners[key] = (agent.pk if agent is not None else None, listener)

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe

    async def publish(self, event: ServerEvent) -> None:
        await self.publish_to(None, event)

    async def publish_to(self, agents: set[int] | None, event: ServerEvent) -> None:
        """`event` to the streams of `agents` (None: every stream)."""
        for pk, listener in list(self._listeners.values()):
            if agents is None or pk in agents:
                try:
                    listener(event)
                except Exception:  # fan-out boundary: one stream must not starve the others
                    logger.exception("a listen stream's listener raised; continuing")
        await anyio.lowlevel.checkpoint()

    def agents(self) -> set[int]:
        return {pk for pk, _ in self._listeners.values() if pk is not None}

    def drop(self, agents: set[int]) -> None:
        """The streams of `agents` (revoked) hear nothing more."""
        for key in [k for k, (pk, _) in self._listeners.items() if pk in agents]:
            del self._listeners[key]


class Notices:
    """The agents connected to this process, their 2025-era sessions and listen streams."""

    def __init__(self) -> None:
        self.bus = AgentBus()
        # The latest of each connected agent (its view as its last request carried it).
        self._agents: dict[int, AgentInfo] = {}
        # What each agent was last given of each list (a fingerprint), by agent and list: a
        # change is told when the list differs from that, whatever was loaded in between.
        self._given: dict[int, dict[str, int]] = {}
        # By Mcp-Session-Id: when last seen, the session, its agent. The SDK makes a session
        # object per request and notifies through the session's long-lived connection, so
        # one object per session is enough.
        self._sessions: dict[str, tuple[float, Any, int]] = {}

    def seen(self, agent: AgentInfo, session_id: str | None = None, session: Any = None) -> None:
        self._agents[agent.pk] = agent
        if session_id and session is not None:
            if len(self._sessions) > LEGACY_SESSIONS_MAX:
                self._forget_idle(time.monotonic() - 60)
            self._sessions[session_id] = (time.monotonic(), session, agent.pk)

    def _forget_idle(self, before: float) -> None:
        for key in [k for k, (seen, _, _) in self._sessions.items() if seen < before]:
            del self._sessions[key]

    def connected(self) -> dict[int, AgentInfo]:
        """The agents that have a session or a listen stream here, as last seen."""
        self._forget_idle(time.monotonic() - LEGACY_SESSION_IDLE)
        pks = {pk for _, _, pk in self._sessions.values()} | self.bus.agents()
        for gone in set(self._agents) - pks:
            del self._agents[gone]
            self._given.pop(gone, None)
        return {pk: self._agents[pk] for pk in pks if pk in self._agents}

    def replace(self, agents: dict[int, AgentInfo], gone: Iterable[int] = ()) -> None:
        """The views of these agents changed (an edit); those `gone` (revoked) hear nothing more."""
        self._agents.update(agents)
        gone = set(gone)
        for key in [k for k, (_, _, pk) in self._sessions.items() if pk in gone]:
            del self._sessions[key]
        self.bus.drop(gone)
        for pk in gone:
            self._agents.pop(pk, None)
            self._given.pop(pk, None)

    def given(self, agent: int, what: str, fingerprint: int) -> None:
        """`agent` was given its list of `what` as `fingerprint` says."""
        self._given.setdefault(agent, {})[what] = fingerprint

    def changed(self, agent: int, now: dict[str, int]) -> list[str]:
        """The lists of `agent` that differ from what it was last given (each then counts as
        given: it is told once)."""
        given = self._given.get(agent)
        if given is None:
            return []
        out = [what for what, fp in now.items() if what in given and given[what] != fp]
        given.update({what: now[what] for what in out})
        return out

    async def tell(self, agents: set[int], what: str = TOOLS) -> None:
        """Tell `agents` their list of `what` (tools, prompts, resources) changed, in both eras."""
        if not agents:
            return
        event, method = LISTS[what]
        await self.bus.publish_to(agents, event)
        for key, (_, session, pk) in list(self._sessions.items()):
            if pk not in agents:
                continue
            try:
                await getattr(session, method)()
            except Exception:  # boundary: a gone session only misses a notice
                self._sessions.pop(key, None)
