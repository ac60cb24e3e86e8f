"""OAuth for HTTP servers, on the SDK's client provider.

The SDK's `OAuthClientProvider` does the MCP authorization flow: protected resource
metadata (RFC 9728), authorization server metadata (RFC 8414), registration (Client ID
Metadata Document or dynamic registration, RFC 7591), the authorization code grant with
PKCE and the `resource` parameter (RFC 8707), scope selection from `WWW-Authenticate`,
step-up on `insufficient_scope`, refresh. A host adds two things around it:

- **Storage that outlives a connection.** Beyond the tokens and the client registration,
  `HostOAuth` keeps what it discovered (metadata, the token's expiry) through the same
  storage, so a connection opened later refreshes against the right token endpoint and
  refreshes *before* the token expires (``refresh_margin``).
- **Two modes.** *Interactive* (a person clicked Connect): the SDK's whole flow runs, the
  redirect handler sends the person to the authorization server and the callback handler
  waits for them to come back. *Unattended* (the pool's connections): nobody is there to
  consent, so the flow only sends the stored token and refreshes it (also once on a 401,
  for a token revoked or expired early); when that is not enough it records that the
  server needs authorization, through the storage, and lets the 401/403 through to the
  transport, which fails the connection or the call as "not authorized".

No Django here: the host passes a storage object (`CredentialStore`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

logger = logging.getLogger(__name__)

# A token is refreshed this long before it expires (or at 90% of its life, if shorter).
REFRESH_MARGIN = 60.0


@dataclass
class Challenge:
    """Why the server refused: what the host shows next to "needs authorization"."""

    status: int
    error: str | None = None
    scope: str | None = None
    token_sent: bool = False
    refresh_failed: bool = False
    at: float = field(default_factory=time.monotonic)

    def describe(self) -> str:
        if self.status == 403 and self.error == "insufficient_scope":
            wanted = f" ({self.scope})" if self.scope else ""
            return f"the server asks for more permissions{wanted}"
        if self.refresh_failed:
            return "the token expired and could not be refreshed"
        if self.token_sent:
            return "the server no longer accepts the token"
        return f"the server requires authorization (HTTP {self.status})"


class CredentialStore(Protocol):
    """Where a server's credentials live (the host keeps them encrypted in its database)."""

    async def get_tokens(self) -> OAuthToken | None: ...
    async def set_tokens(self, tokens: OAuthToken) -> None: ...
    async def get_client_info(self) -> OAuthClientInformationFull | None: ...
    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None: ...
    async def set_state(self, state: dict[str, Any]) -> None: ...
    async def needs_authorization(self, challenge: Challenge) -> None: ...

    async def load(self) -> tuple[OAuthToken | None, OAuthClientInformationFull | None, dict[str, Any]]:
        """The tokens, the registration and the state together: what a new connection starts
        from, in one read (every HTTP connection starts here, OAuth or not)."""
        ...


class _Context(OAuthContext):
    refresh_margin: float = REFRESH_MARGIN

    def update_token_expiry(self, token: OAuthToken) -> None:
        if token.expires_in is None:
            self.token_expiry_time = None
            return
        lifetime = float(token.expires_in)
        self.token_expiry_time = time.time() + lifetime - min(self.refresh_margin, lifetime / 10)


class _Persisting:
    """The SDK's view of the storage: token and registration writes also save what the
    provider learned (metadata, expiry), so the next connection starts from it."""

    def __init__(self, provider: HostOAuth, store: CredentialStore) -> None:
        self._provider = provider
        self._store = store

    async def get_tokens(self) -> OAuthToken | None:
        return await self._store.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._store.set_tokens(tokens)
        await self._store.set_state(self._provider.learned())

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self._store.get_client_info()

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._store.set_client_info(client_info)


class HostOAuth(OAuthClientProvider):
    def __init__(
        self,
        server_url: str,
        client_metadata: OAuthClientMetadata,
        store: CredentialStore,
        *,
        interactive: bool = False,
        redirect_handler: Callable[[str], Awaitable[None]] | None = None,
        callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
        client_metadata_url: str | None = None,
        refresh_margin: float = REFRESH_MARGIN,
    ) -> None:
        super().__init__(
            server_url,
            client_metadata,
            _Persisting(self, store),
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=client_metadata_url,
        )
        base = self.context
        self.context = _Context(
            server_url=base.server_url,
            client_metadata=base.client_metadata,
            storage=base.storage,
            redirect_handler=base.redirect_handler,
            callback_handler=base.callback_handler,
            client_metadata_url=base.client_metadata_url,
        )
        self.context.refresh_margin = refresh_margin
        self.store = store
        self.interactive = interactive
        self.challenge: Challenge | None = None

    # -- what survives a connection ----------------------------------------------------

    def learned(self) -> dict[str, Any]:
        ctx = self.context
        return {
            "token_expires_at": ctx.token_expiry_time,
            "auth_server_url": ctx.auth_server_url,
            "oauth_metadata": ctx.oauth_metadata.model_dump(mode="json", exclude_none=True)
            if ctx.oauth_metadata
            else None,
            "resource_metadata": ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
            if ctx.protected_resource_metadata
            else None,
        }

    async def _initialize(self) -> None:
        # The SDK's own start (tokens, then the registration) and the state, in one read.
        tokens, client_info, state = await self.store.load()
        ctx = self.context
        ctx.current_tokens = tokens
        ctx.client_info = client_info
        self._initialized = True
        ctx.token_expiry_time = state.get("token_expires_at")
        ctx.auth_server_url = ctx.auth_server_url or state.get("auth_server_url")
        try:
            if state.get("oauth_metadata") and ctx.oauth_metadata is None:
                ctx.oauth_metadata = OAuthMetadata.model_validate(state["oauth_metadata"])
            if state.get("resource_metadata") and ctx.protected_resource_metadata is None:
                ctx.protected_resource_metadata = ProtectedResourceMetadata.model_validate(state["resource_metadata"])
        except ValueError:  # stored metadata from an older shape: rediscovered on the next flow
            logger.info("stored OAuth metadata for %s no longer parses; it will be rediscovered", ctx.server_url)

    # -- the flow ------------------------------------------------------------------------

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.interactive:
            flow = super()._auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
            self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
            refreshed = refresh_failed = False
            held = self.context.current_tokens
            # Another process (web, worker) may have refreshed it already: the refresh token
            # it used is then spent, and the stored tokens are the live ones.
            if (
                not self.context.is_token_valid()
                and self.context.can_refresh_token()
                and not await self._adopt_stored(than=held)
            ):
                refreshed = True
                response = yield await self._refresh_token()
                refresh_failed = not await self._after_refresh(response) and not await self._adopt_stored(than=held)
            if self.context.is_token_valid():
                self._add_auth_header(request)
            response = yield request
            if response.status_code == 401 and not refreshed and self.context.can_refresh_token():
                # Revoked or expired early: a refresh token may still be good.
                held = self.context.current_tokens
                refresh_response = yield await self._refresh_token()
                if await self._after_refresh(refresh_response) or await self._adopt_stored(than=held):
                    self._add_auth_header(request)
                    response = yield request
                else:
                    refresh_failed = True
            error = extract_field_from_www_auth(response, "error")
            if response.status_code == 401 or (response.status_code == 403 and error == "insufficient_scope"):
                self.challenge = Challenge(
                    response.status_code,
                    error,
                    extract_scope_from_www_auth(response),
                    token_sent="authorization" in request.headers,
                    refresh_failed=refresh_failed,
                )
                await self.store.needs_authorization(self.challenge)

    async def _adopt_stored(self, than: OAuthToken | None) -> bool:
        """Take the stored tokens when they differ from `than` (the ones this connection
        held) and are still valid."""
        stored, _, state = await self.store.load()
        if stored is None or (than is not None and stored.access_token == than.access_token):
            return False
        self.context.current_tokens = stored
        self.context.token_expiry_time = state.get("token_expires_at")
        self._initialized = True
        return self.context.is_token_valid()

    async def _after_refresh(self, response: httpx2.Response) -> bool:
        ok = await self._handle_refresh_response(response)
        if not ok:
            self._initialized = False
        return ok


async def headless_authorize(
    http: httpx2.AsyncClient, authorization_url: str, redirect_uri: str
) -> AuthorizationCodeResult:
    """Follow an authorization URL without a person (a server that consents at once, as the
    conformance suite's do) and read the code from the redirect back to `redirect_uri`."""
    url = authorization_url
    for _ in range(10):
        response = await http.get(url, follow_redirects=False)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(f"the authorization server answered HTTP {response.status_code} without a redirect")
        url = str(response.url.join(location))
        if url.startswith(redirect_uri):
            query = parse_qs(urlsplit(url).query)
            if "error" in query:
                raise RuntimeError(f"authorization refused: {query['error'][0]}")
            return AuthorizationCodeResult(
                code=query.get("code", [""])[0],
                state=query.get("state", [None])[0],
                iss=query.get("iss", [None])[0],
            )
    raise RuntimeError("too many redirects from the authorization server")
