"""The agents' side: the official SDK client pointed at a host's /mcp with a token."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx2
import mcp
import mcp_types as types
from mcp.client.streamable_http import streamable_http_client

if TYPE_CHECKING:
    from tests.gateway.conftest import GatewayHost

MODES = ["auto", "legacy"]
# What `mode` settles on against the endpoint: auto probes server/discover and stays modern.
VERSION = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@contextlib.asynccontextmanager
async def agent(host: GatewayHost, token_name: str, mode: str, **kw: Any) -> AsyncIterator[mcp.Client]:
    """`mcp.Client` over Streamable HTTP with `Authorization: Bearer <token>`.

    The HTTP client gets the SDK's own default timeouts (30 s, 300 s for reading a stream).
    """
    headers = {"Authorization": f"Bearer {host.tokens[token_name]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        mcp.Client(streamable_http_client(host.mcp_url, http_client=http), mode=mode, **kw) as client,
    ):
        assert client.protocol_version == VERSION[mode]
        yield client


async def tool_names(client: mcp.Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
