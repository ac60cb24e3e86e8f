"""A local OAuth-protected MCP server for tests (``python -m tests.oauthserver``); see ``server.py``."""
