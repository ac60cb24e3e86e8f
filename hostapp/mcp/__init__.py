"""The connection layer: the host's clients of MCP servers, over the official SDK.

Plain configuration in, plain data out; nothing here imports Django.
"""

from __future__ import annotations

from .config import ConfigError, ServerConfig, parse_document, parse_entry, render_document
from .connection import LOG_LEVELS, CallWatch, InputAsk, InputRefused, Rounds, input_required, result_failure
from .errors import McpFailure
from .pool import Pool, PoolEvent, PoolPolicy, ServerStatus

__all__ = [
    "LOG_LEVELS",
    "CallWatch",
    "ConfigError",
    "InputAsk",
    "InputRefused",
    "McpFailure",
    "Pool",
    "PoolEvent",
    "PoolPolicy",
    "ServerConfig",
    "Rounds",
    "ServerStatus",
    "parse_document",
    "parse_entry",
    "input_required",
    "render_document",
    "result_failure",
]
