"""A one-tool MCP server for benchmarks: `echo` returns its text, nothing else.

Built on the SDK's ``MCPServer`` and run over stdio (``python bench/echo_server.py``), so a
benchmark measures the protocol stack and the client, not a tool's own work. It speaks both
eras like any ``mcp`` 2.x server; a client in ``mode="auto"`` gets 2026-07-28.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench-echo", instructions="Echoes text back; for benchmarks.")


@server.tool(
    name="echo",
    title="Echo",
    description="Return the given text unchanged.",
    annotations=ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    structured_output=False,
)
def echo(text: str = "") -> str:
    return text


if __name__ == "__main__":
    server.run()
