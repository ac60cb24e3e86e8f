"""Bundled MCP servers for Patchbay: the mailbox, tasks and calendar of an inbox assistant.

Each server is a small program built on the official `mcp` SDK, runnable as
`python -m servers.<name>` (stdio) or with `--transport http` (Streamable HTTP on
127.0.0.1). See `servers/README.md`.
"""
