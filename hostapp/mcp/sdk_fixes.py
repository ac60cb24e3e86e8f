"""Where the host does less work than the SDK it runs on, for the same outcome.

Each fix replaces one SDK function with one that returns and raises exactly as it does, and
is applied only to the SDK release it was checked against (`CHECKED`): another release
keeps its own code until someone checks it again (a test fails to say so).

* `mcp_types.methods.validate_server_result`. The client session checks every result
  against the negotiated revision's shape with it. The SDK validates the result and then
  dumps the validated model to JSON, and throws the dump away: for a listing of 100 tools,
  the dump costs more than the validation. The fix validates only. The surface models have
  no serializers of their own, so a result that validates also dumps: nothing the dump could
  raise is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from types import UnionType
from typing import Any

import mcp_types.methods as _methods
from pydantic import BaseModel

# The SDK releases (mcp-types) whose functions the fixes were checked against.
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


def apply() -> bool:
    """Install the fixes if the installed SDK is one they were checked against; say whether."""
    if version("mcp-types") not in CHECKED:
        return False
    _methods.validate_server_result = validate_server_result
    return True


applied = apply()
