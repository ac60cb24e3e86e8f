"""Where the host does less work than the SDK it runs on, for the same outcome.

Each fix replaces one SDK function with one that returns and raises exactly as it does, and
is applied only to the SDK release it was checked against (`CHECKED`): another release
keeps its own code until someone checks it again (a test fails to say so).

* `mcp_types.methods.validate_server_result`. The client session checks every result
  against the negotiated revision's shape with it. The SDK validates the result and then
  dumps the validated model to JSON, and throws the dump away: for a listing of 100 tools,
  the dump costs more than the validation. The fix validates only. The surface models have
  no serializers of their own, so a result parsed from JSON (what the session always has)
  that validates also dumps: nothing the dump could raise is lost. (A Python object that is
  not JSON, which no server can send, would fail the dump and pass the fix.)
* `mcp_types.jsonrpc_message_adapter.validate_json`, which every client transport parses
  each incoming message with, into a union of the four JSON-RPC envelopes. Pydantic tries
  each in turn, so a result (a listing: a hundred kilobytes and more) is read as a request
  and as a notification before it is read as a response: twice the work of reading it as
  a response. The fix reads a message that holds `"result"` first as a response of exactly
  the response's keys (`jsonrpc`, `id`, `result`, no other), the one envelope of the four
  such a message can be; a message with any other key (a request, a notification, an
  error, anything odd) is left to the SDK's union, as is one without `"result"` spelled
  plainly (no response but one with an escaped key).
* `find_invalid_x_mcp_header` and `x_mcp_header_map` as the client session calls them, on
  every tool of every listing under the 2026 revision: each walks the tool's input schema
  for `x-mcp-header` annotations, through generators and a tuple per position, and most
  schemas have none. The fix first looks for the key in every object of the schema, and
  only a schema that has it somewhere (or holds something other than plain JSON objects
  and arrays, or is too deep to look through) goes to the SDK's walks. A schema without
  the key has no annotation to be invalid (None) and none to map (`{}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from types import UnionType
from typing import Any

import mcp.client.session as _session
import mcp.client.streamable_http as _streamable_http
import mcp_types as _types
import mcp_types.methods as _methods
from mcp.shared.inbound import X_MCP_HEADER_KEY
from mcp_types.jsonrpc import JSONRPCResponse
from pydantic import BaseModel, ConfigDict, ValidationError

# The SDK releases (mcp and mcp-types, released together) whose functions the fixes were
# checked against.
CHECKED = frozenset({"2.3.0"})

_sdk_validate_server_result = _methods.validate_server_result


def validate_server_result(
    method: str,
    version: str,
    data: Mapping[str, Any],
    *,
    surface: Mapping[tuple[str, str], type[BaseModel] | UnionType] = _methods.SERVER_RESULTS,
) -> None:
    """`mcp_types.methods.validate_server_result` without the discarded dump: raises
    ValueError for an unknown revision, KeyError for a method the revision does not have,
    pydantic's ValidationError for a result of the wrong shape."""
    _methods._check_known_version(version)
    _methods._adapter(surface[(method, version)]).validate_python(data, by_name=False)


class _ExactResponse(JSONRPCResponse):
    """A response with no key besides its own: the union could read it as nothing else."""

    model_config = ConfigDict(extra="forbid")


class MessageAdapter:
    """The SDK's message adapter, reading a response of exactly a response's keys directly
    (the SDK's own for everything else, and for every other method)."""

    def __init__(self, sdk: Any) -> None:
        self._sdk = sdk

    def __getattr__(self, name: str) -> Any:
        if name == "_sdk" or name.startswith("__"):  # not set yet (a copy being made), or Python's own
            raise AttributeError(name)
        return getattr(self._sdk, name)

    def validate_json(self, data: Any, /, **options: Any) -> Any:
        marker = b'"result"' if isinstance(data, bytes | bytearray) else '"result"'
        if set(options) <= {"by_name"} and isinstance(data, str | bytes | bytearray) and marker in data:
            try:
                exact = _ExactResponse.model_validate_json(data, **options)
            except ValidationError:
                pass
            else:
                return JSONRPCResponse.model_construct(jsonrpc=exact.jsonrpc, id=exact.id, result=exact.result)
        return self._sdk.validate_json(data, **options)


_sdk_message_adapter = _types.jsonrpc_message_adapter
message_adapter = MessageAdapter(_sdk_message_adapter)

# Where the client transports find the adapter: Streamable HTTP imported the name, stdio and
# SSE look it up on `mcp_types` at each message (as the SDK's server stdio and SSE transports
# do, in a process that serves with them: they get the same messages as before).
_ADAPTER_HOMES = (_types, _streamable_http)


_sdk_find_invalid_x_mcp_header = _session.find_invalid_x_mcp_header
_sdk_x_mcp_header_map = _session.x_mcp_header_map
_CONTAINERS = (dict, list)


def _may_annotate(node: Any) -> bool:
    """False only if `node` is plain JSON (dicts, lists, scalars) with no object anywhere in
    it that has the `x-mcp-header` key: then the SDK's walks find nothing."""
    if type(node) is dict:
        if X_MCP_HEADER_KEY in node:
            return True
        items = node.values()
    elif type(node) is list:
        items = node
    else:
        return isinstance(node, _CONTAINERS)  # a subclass: the SDK's walk decides
    for item in items:  # noqa: SIM110 - `any()` over a generator costs twice as much here
        if isinstance(item, _CONTAINERS) and _may_annotate(item):
            return True
    return False


def _has_no_annotation(input_schema: Any) -> bool:
    try:
        return not _may_annotate(input_schema)
    except RecursionError:  # deeper than Python's stack: the SDK's walk keeps its own
        return False


def find_invalid_x_mcp_header(input_schema: Any) -> str | None:
    """`mcp.shared.inbound.find_invalid_x_mcp_header`, answering None at once for a schema
    without the key."""
    return None if _has_no_annotation(input_schema) else _sdk_find_invalid_x_mcp_header(input_schema)


def x_mcp_header_map(input_schema: Any) -> dict[tuple[str, ...], str]:
    """`mcp.shared.inbound.x_mcp_header_map`, answering `{}` at once for a schema without
    the key."""
    return {} if _has_no_annotation(input_schema) else _sdk_x_mcp_header_map(input_schema)


def apply() -> bool:
    """Install the fixes if the installed SDK is one they were checked against; say whether."""
    if version("mcp-types") not in CHECKED or version("mcp") not in CHECKED:
        return False
    _methods.validate_server_result = validate_server_result
    _session.find_invalid_x_mcp_header = find_invalid_x_mcp_header
    _session.x_mcp_header_map = x_mcp_header_map
    for module in _ADAPTER_HOMES:
        module.jsonrpc_message_adapter = message_adapter  # type: ignore[attr-defined]
    return True


def remove() -> None:
    """Put the SDK's own functions back (the catalog benchmark's floor measures the SDK as
    released)."""
    _methods.validate_server_result = _sdk_validate_server_result
    _session.find_invalid_x_mcp_header = _sdk_find_invalid_x_mcp_header
    _session.x_mcp_header_map = _sdk_x_mcp_header_map
    for module in _ADAPTER_HOMES:
        module.jsonrpc_message_adapter = _sdk_message_adapter  # type: ignore[attr-defined]


applied = apply()
