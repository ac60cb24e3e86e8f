"""A conformance client built on Patchbay's connection layer (``hostapp.mcp``).

The official conformance suite (npm ``@modelcontextprotocol/conformance``) runs it as
``<python> tests/conformance/client.py <server-url>``: the mock server's URL is the last
argument, the scenario is in ``MCP_CONFORMANCE_SCENARIO``, scenario data (if any) in
``MCP_CONFORMANCE_CONTEXT``, and the modern suite also sets
``MCP_CONFORMANCE_PROTOCOL_VERSION``. Every scenario goes through the host's own
``Pool`` (one configured HTTP server, ``mcp.Client(mode="auto")`` underneath), exactly as
the host talks to a real server: no hand-written protocol here.

Exit status: 0 when the scenario's steps all succeeded, 1 when one failed, 2 on a usage
error (no URL, unknown scenario). Logs go to stderr; the suite keeps them per scenario
with ``-o DIR``.

The ``auth/*`` scenarios (all authorization code flows) run the host's OAuth client,
``hostapp.mcp.oauth.HostOAuth`` in interactive mode, on the pool's connection: the
pool's ``auth_factory`` hands each connection a provider over one in-memory credential
store, and ``headless_authorize`` plays the person at the consent page (the suite's
authorization servers redirect back at once). Pre-registered client credentials come
from ``MCP_CONFORMANCE_CONTEXT``. In the scenarios whose server misbehaves (a foreign
``resource``, a wrong ``iss``...) the client refuses to go on and exits 1, which is what
they check.

A server's request for input (elicitation, in both eras) is answered as a person at the
host's form would who accepts what it offers: every default filled in (SEP-1034). Scenarios
the host does not pass are still attempted the way the host would: connect and use the
server. They fail, and the baselines next to this file (``baseline-*.yml``) say why.

No Django: the layer is imported without running ``hostapp/__init__.py`` (which loads
the Celery app and, through it, Django).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

ROOT = Path(__file__).resolve().parents[2]


def _import_layer() -> Any:
    """``hostapp.mcp`` alone: a bare ``hostapp`` package stands in for the real one."""
    if "hostapp" not in sys.modules:
        stub = types.ModuleType("hostapp")
        stub.__path__ = [str(ROOT / "hostapp")]
        sys.modules["hostapp"] = stub
    import hostapp.mcp as layer
    import hostapp.mcp.elicitation  # noqa: F401  (layer.elicitation)
    import hostapp.mcp.oauth  # noqa: F401  (the host's OAuth client: layer.oauth)

    return layer


layer = _import_layer()
McpFailure = layer.McpFailure
with_defaults = layer.elicitation.with_defaults
oauth = layer.oauth

logger = logging.getLogger("conformance-client")

SERVER = "conformance"
# The suite kills a client after --timeout (the tests pass 100 s).
# The layer bounds the `server/discover` probe by a third of the connect timeout; under
# the suite's load (every scenario's client starts at once) the probe must not run out,
# or a modern mock would be taken for a legacy server.
CONNECT_TIMEOUT = 30.0
CALL_TIMEOUT = 30.0
# The host's own supervision policy: a permanent failure (401, 404...) ends the connect at
# once, a transient one is retried as the host would, within CONNECT_TIMEOUT.
POLICY = layer.PoolPolicy()


class ScenarioFailed(Exception):
    pass


class Session:
    """The pool with the one server configured, plus the calls the scenarios make."""

    def __init__(self, url: str, auth_factory: Callable[[Any], Any] | None = None) -> None:
        self.pool = layer.Pool(POLICY, auth_factory=auth_factory)
        self.pool.configure(
            [layer.ServerConfig(SERVER, "http", url=url, connect_timeout=CONNECT_TIMEOUT, call_timeout=CALL_TIMEOUT)]
        )
        self.tools: list[dict[str, Any]] = []

    def connect(self) -> None:
        status = self.pool.connect(SERVER)
        if status.state not in ("ready", "degraded"):
            raise ScenarioFailed(f"connect: {status.state}: {status.last_error}")
        logger.info(
            "connected: %s era, protocol %s, server %s", status.era, status.protocol_version, status.server_info
        )
        _check_version(status.protocol_version, status.era)

    def list_tools(self) -> list[dict[str, Any]]:
        self.tools = self.pool.list_tools(SERVER)
        logger.info("tools: %s", [t.get("name") for t in self.tools])
        return self.tools

    def call(self, tool: str, arguments: dict[str, Any] | None = None, *, check: bool = True) -> dict[str, Any]:
        result = self.pool.call_tool(SERVER, tool, arguments or {}, watch=layer.CallWatch(on_elicit=_accept_as_offered))
        logger.info("%s -> %s", tool, json.dumps(result)[:500])
        if check:
            failure = layer.result_failure(result, tool, {t.get("name") for t in self.tools} or None)
            if failure is not None:
                raise failure
        return result

    def close(self) -> None:
        self.pool.close()


async def _accept_as_offered(ask: Any) -> dict[str, Any]:
    """The person at the host's form accepts it as the server offered it: every default."""
    logger.info("input asked: %s", json.dumps(ask.params)[:500])
    if (ask.params.get("mode") or "form") == "url":
        return {"action": "accept"}
    return {"action": "accept", "content": with_defaults(ask.params.get("requestedSchema"), {})}


def _check_version(negotiated: str, era: str) -> None:
    """Hold the connection to the era the suite asks for (``MCP_CONFORMANCE_PROTOCOL_VERSION``).

    The layer always connects with ``mode="auto"`` (discover, fall back to initialize), as
    the host does with every server; it cannot be pinned to a version. So the client checks
    the outcome instead: a modern version must be the one negotiated, a handshake-era
    version must have led to the initialize handshake. 0.1.16 does not set the variable.
    """
    wanted = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
    if not wanted:
        return
    if wanted in MODERN_PROTOCOL_VERSIONS:
        if negotiated != wanted:
            raise ScenarioFailed(f"the suite asks for {wanted}, the connection negotiated {negotiated or '(none)'}")
    elif era != "legacy":
        raise ScenarioFailed(
            f"the suite asks for {wanted} (initialize handshake), the connection is {era} {negotiated}"
        )


Scenario = Callable[[Session, dict[str, Any]], None]
SCENARIOS: dict[str, Scenario] = {}


def scenario(*names: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        for name in names:
            SCENARIOS[name] = fn
        return fn

    return register


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScenarioFailed(f"MCP_CONFORMANCE_CONTEXT is not JSON: {exc}") from None
    return value if isinstance(value, dict) else {}


@scenario("initialize", "json-schema-ref-no-deref")
def list_only(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()


@scenario("tools_call", "request-metadata", "http-standard-headers")
def add_numbers(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()
    s.call("add_numbers", {"a": 5, "b": 3})


@scenario("sse-retry")
def sse_retry(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()
    s.call("test_reconnection")


@scenario("elicitation-sep1034-client-defaults")
def elicitation_defaults(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()
    s.call("test_client_elicitation_defaults")


@scenario("sep-2322-client-request-state")
def request_state(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()
    failed: list[str] = []
    for tool in ("test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type"):
        try:
            s.call(tool)
        except McpFailure as exc:
            logger.warning("%s failed: %s", tool, exc)
            failed.append(tool)
    if failed:
        raise ScenarioFailed(f"failed: {', '.join(failed)}")


@scenario("http-custom-headers")
def custom_headers(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    s.list_tools()
    calls = ctx.get("toolCalls") or []
    if not calls:
        raise ScenarioFailed("MCP_CONFORMANCE_CONTEXT has no toolCalls")
    for call in calls:
        s.call(call["name"], call.get("arguments") or {}, check=False)


@scenario("http-invalid-tool-headers")
def invalid_tool_headers(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    for tool in s.list_tools():
        try:
            s.call(tool["name"], _stub_arguments(tool.get("inputSchema") or {}), check=False)
        except McpFailure as exc:  # the scenario allows client errors
            logger.info("%s: %s", tool["name"], exc)


@scenario("json-schema-2020-12-preservation")
def schema_preservation(s: Session, ctx: dict[str, Any]) -> None:
    s.connect()
    tools = {t["name"]: t for t in s.list_tools()}
    source = tools.get("json_schema_2020_12_tool")
    if source is None:
        raise ScenarioFailed("json_schema_2020_12_tool is not listed")
    s.call("json_schema_echo", {"schema": source["inputSchema"]})


def _stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value of the declared type for each property (enough to make a call)."""
    stubs = {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    out: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        out[name] = stubs.get(kind if isinstance(kind, str) else "string", "x")
    return out


# -- OAuth -------------------------------------------------------------------------------
#
# Every auth/* scenario the suites run is the authorization code flow a person starts with
# Connect: the host's OAuth client (`hostapp.mcp.oauth.HostOAuth`, interactive) on the
# pool's connection, with an in-memory credential store. The suite's authorization servers
# consent at once, so the "browser" is `headless_authorize`, which follows the
# authorization URL and reads the code off the redirect back to REDIRECT_URI (nothing
# listens there).

REDIRECT_URI = "http://localhost:3000/callback"
# The Client ID Metadata Document URL the suite expects as client_id (auth/basic-cimd).
# It is a constant of the suite's code in both versions, not passed in the context.
CIMD_URL = "https://conformance-test.local/client-metadata.json"


class MemoryStore:
    """`hostapp.mcp.oauth.CredentialStore` in memory, for one scenario."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info
        self.state: dict[str, Any] = {}
        self.challenges: list[Any] = []

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info

    async def set_state(self, state: dict[str, Any]) -> None:
        self.state = dict(state)

    async def needs_authorization(self, challenge: Any) -> None:
        logger.info("needs authorization: %s", challenge.describe())
        self.challenges.append(challenge)

    async def load(self) -> tuple[OAuthToken | None, OAuthClientInformationFull | None, dict[str, Any]]:
        return self.tokens, self.client_info, dict(self.state)


class HeadlessBrowser:
    """The redirect and callback handlers: the person who consents at once."""

    def __init__(self, redirect_uri: str) -> None:
        self.redirect_uri = redirect_uri
        self.authorizations = 0
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.authorizations += 1
        logger.info("authorization %d: %s", self.authorizations, authorization_url)
        async with httpx2.AsyncClient(timeout=CALL_TIMEOUT) as http:
            self._result = await oauth.headless_authorize(http, authorization_url, self.redirect_uri)

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise RuntimeError("the authorization server sent no authorization response")
        return result


class OAuthSetup:
    """What the host's Connect would build for the scenario's server."""

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.store = MemoryStore(_pre_registered(ctx))
        self.browser = HeadlessBrowser(REDIRECT_URI)

    def client_metadata(self) -> OAuthClientMetadata:
        # As the host registers itself (hostapp.oauth.store.client_metadata): a public
        # client that refreshes its tokens.
        return OAuthClientMetadata(
            client_name="Patchbay conformance client",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )

    def auth_for(self, config: Any) -> Any:
        """The pool's `auth_factory`: one provider per connection, the store shared."""
        return oauth.HostOAuth(
            config.url,
            self.client_metadata(),
            self.store,
            interactive=True,
            redirect_handler=self.browser.redirect,
            callback_handler=self.browser.callback,
            client_metadata_url=CIMD_URL,
        )


def _pre_registered(ctx: dict[str, Any]) -> OAuthClientInformationFull | None:
    """Client credentials the scenario hands over (auth/pre-registration), as the host would
    store them: a confidential client authenticates with HTTP Basic (RFC 6749 2.3.1), and
    the credentials are bound to the issuer when the scenario names it."""
    client_id = ctx.get("client_id")
    if not client_id:
        return None
    secret = ctx.get("client_secret")
    return OAuthClientInformationFull(
        client_id=client_id,
        client_secret=secret,
        redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
        token_endpoint_auth_method="client_secret_basic" if secret else "none",
        issuer=ctx.get("issuer"),
    )


def auth_scenario(s: Session, ctx: dict[str, Any]) -> None:
    """Connect through the OAuth flow, list the tools and call the first one (a step-up
    scenario asks for more scope on the call)."""
    s.connect()
    tools = s.list_tools()
    if tools:
        s.call(tools[0]["name"])


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if len(argv) < 2:
        print("usage: client.py <server-url>  (scenario in MCP_CONFORMANCE_SCENARIO)", file=sys.stderr)
        return 2
    url = argv[-1]
    name = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
    handler = SCENARIOS.get(name) or (auth_scenario if name.startswith("auth/") else None)
    if handler is None:
        print(f"unknown scenario {name!r}", file=sys.stderr)
        return 2
    logger.info("scenario %s, protocol version %s, server %s", name, version or "(not set)", url)
    try:
        ctx = context()
    except ScenarioFailed as exc:
        logger.error("scenario %s: %s", name, exc)
        return 1
    # Auth scenarios: the pool's connections carry the host's OAuth client.
    setup = OAuthSetup(ctx) if name.startswith("auth/") else None
    session = Session(url, auth_factory=setup.auth_for if setup else None)
    try:
        handler(session, ctx)
    except (ScenarioFailed, McpFailure) as exc:
        logger.error("scenario %s failed: %s", name, exc)
        return 1
    finally:
        session.close()
    logger.info("scenario %s passed", name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
