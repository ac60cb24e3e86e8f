"""A tiny stdio MCP server for the browser tests, whose tools' texts the test controls.

Usage: ``python lab_server.py TEXTS.json``. The JSON file maps a tool name to
``{"description": "...", "params": {"<argument>": "<its description>"}}`` (both optional).
It is read again on every ``tools/list``, so a test changes what the host sees by rewriting
the file and refreshing the server (``manage.py mcp refresh lab``).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool, ToolAnnotations

TEXTS = Path(sys.argv[1]) if len(sys.argv) > 1 else None
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class LabServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        texts = json.loads(TEXTS.read_text()) if TEXTS else {}
        out = []
        for tool in tools:
            spec = texts.get(tool.name) or {}
            update: dict[str, object] = {}
            if "description" in spec:
                update["description"] = spec["description"]
            if spec.get("params"):
                schema = copy.deepcopy(tool.input_schema)
                for name, text in spec["params"].items():
                    schema["properties"][name]["description"] = text
                update["input_schema"] = schema
            out.append(tool.model_copy(update=update))
        return out


server = LabServer("lab")


@server.tool(name="lookup", title="Look up a word", annotations=READ_ONLY)
def lookup(word: str) -> str:
    """Look a word up (the test's file replaces this description)."""
    return f"{word}: found"


@server.tool(name="echo", title="Echo", annotations=READ_ONLY)
def echo(text: str) -> str:
    """Echo the text back (the test's file replaces this description)."""
    return text


@server.tool(name="greet", title="Greet", annotations=READ_ONLY)
def greet(name: str) -> str:
    """Greet someone (the test's file describes the argument)."""
    return f"Hello, {name}"


if __name__ == "__main__":
    server.run()
