"""Servers and tools as plain data: what `mcp servers --json`, `mcp tools --json` and the
JSON API show of them."""

from __future__ import annotations

from typing import Any

from .actions import applied_annotations
from .models import Server, Tool


def server_row(server: Server, tool_count: int) -> dict[str, Any]:
    """A server, its state summed up and as each live process sees it."""
    return {
        "name": server.name,
        "transport": server.transport,
        "state": server.state,
        "protocol_version": server.protocol_version,
        "tool_count": tool_count,
        "trusted": server.trusted,
        "enabled": server.enabled,
        "stale": server.stale,
        "last_error": (server.last_error or {}).get("message") or server.refresh_error or None,
        "processes": [
            {
                "process": state.process.name,
                "role": state.process.role,
                "state": state.state,
                "since": state.state_at.isoformat(),
                "last_error": (state.last_error or {}).get("message"),
            }
            for state in server.process_states
        ],
    }


def tool_row(tool: Tool) -> dict[str, Any]:
    return {
        "name": tool.exposed_name,
        "server": tool.server.name,
        "original_name": tool.original_name,
        "title": tool.title,
        "description": tool.description,
        "effective_class": tool.effective_class,
        "annotations": applied_annotations(tool),
        "claimed_annotations": tool.annotations,
        "input_schema": tool.input_schema,
        "output_schema": tool.output_schema,
        "status": tool.status,
        # An admin's name and description for agents (None: the exposed name, the server's).
        "agent_name": tool.agent_name or None,
        "agent_description": tool.agent_description or None,
    }
