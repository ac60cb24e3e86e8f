"""The schema the SDK checks `Mcp-Param-*` headers against comes from the endpoint's memory,
and only for a tool the request's agent may use."""

from __future__ import annotations

import mcp_types as types

from hostapp.gateway.agent_catalog import Catalog, Entry
from hostapp.gateway.agent_view import AgentInfo, AgentView
from hostapp.gateway.notices import current_agent
from hostapp.gateway.server import Gateway

SCHEMA = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}


def _gateway() -> Gateway:
    gateway = Gateway()
    deploy = Entry("ops", types.Tool(name="ops__deploy", input_schema=SCHEMA))
    read = Entry("mailbox", types.Tool(name="mailbox__read", input_schema={"type": "object"}))
    gateway.catalog.keep(Catalog({"ops__deploy": deploy, "mailbox__read": read}, {}))
    return gateway


def test_an_agent_gets_the_schema_of_a_tool_it_may_use() -> None:
    gateway = _gateway()
    token = current_agent.set(AgentInfo(1, "deployer", AgentView(("ops",))))
    try:
        assert gateway._input_schema("ops__deploy") == SCHEMA
    finally:
        current_agent.reset(token)


def test_a_tool_of_another_server_has_no_schema_for_an_agent_limited_elsewhere() -> None:
    """As in its tool list, the tool does not exist for this agent: no header check reveals it."""
    gateway = _gateway()
    token = current_agent.set(AgentInfo(2, "reader", AgentView(("mailbox",))))
    try:
        assert gateway._input_schema("ops__deploy") is None
        assert gateway._input_schema("mailbox__read") == {"type": "object"}
    finally:
        current_agent.reset(token)


def test_no_agent_or_an_unknown_tool_means_nothing_to_check() -> None:
    gateway = _gateway()
    assert gateway._input_schema("ops__deploy") is None  # outside a request
    token = current_agent.set(AgentInfo(3, "any", AgentView()))
    try:
        assert gateway._input_schema("nope__x") is None
        assert gateway._input_schema("ops__deploy") == SCHEMA  # no server list: every server
    finally:
        current_agent.reset(token)
