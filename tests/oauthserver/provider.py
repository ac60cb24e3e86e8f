"""In-memory `OAuthAuthorizationServerProvider` for the test OAuth server.

The MCP SDK's handlers (`mcp.server.auth.handlers.*`) do the HTTP side of the
authorization server: request validation, PKCE S256 verification, client
authentication, error responses. This module only keeps the records they ask
for (clients, pending consents, codes, tokens) and the counters tests read from
`/admin/state`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx2
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import ValidationError

AUTH_CODE_LIFETIME = 300
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def same_resource(a: str, b: str) -> bool:
    """RFC 8707 resource indicators compared as URLs, a trailing slash aside."""
    return a.rstrip("/") == b.rstrip("/")


@dataclass
class ServerOptions:
    """What the command line configures; see `tests.oauthserver.server.parse_args`."""

    port: int
    scopes: list[str] = field(default_factory=lambda: ["mcp:read", "mcp:write"])
    required_scopes: list[str] = field(default_factory=lambda: ["mcp:read"])
    write_scope: str = "mcp:write"
    token_lifetime: int = 3600
    refresh_token_lifetime: int | None = None
    auto_approve: bool = False
    cimd: bool = False
    iss: bool = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        # One spelling everywhere: the metadata `issuer`, the PRM `authorization_servers`
        # entry and the RFC 9207 `iss` parameter are compared as plain strings.
        return f"{self.base_url}/"

    @property
    def resource(self) -> str:
        return f"{self.base_url}/mcp"


@dataclass
class PendingConsent:
    client: OAuthClientInformationFull
    params: AuthorizationParams
    created_at: float


class InMemoryProvider:
    """Implements the SDK's `OAuthAuthorizationServerProvider` protocol with dicts."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.cimd_clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, PendingConsent] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        # access token <-> refresh token of one grant, so revoking either revokes both
        self.pair_of_access: dict[str, str] = {}
        self.pair_of_refresh: dict[str, str] = {}
        self.stats: dict[str, int] = {
            "codes_issued": 0,
            "tokens_issued": 0,
            "refreshes": 0,
            "revocations": 0,
            "revoke_all_calls": 0,
            "consents_approved": 0,
            "consents_denied": 0,
        }
        self.last_authorize: dict[str, Any] | None = None

    # --- clients -------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        client = self.clients.get(client_id)
        if client is None and self.options.cimd and _looks_like_metadata_url(client_id):
            client = await self._fetch_client_metadata_document(client_id)
        return client

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        # Server policy (RFC 7591 §3.2.1 lets the server replace requested metadata): every
        # client may ask for every supported scope. The SDK client registers with the scope
        # it first needs and does not re-register on a step-up, so a narrower record would
        # turn each step-up into `invalid_scope`. The SDK echoes this object as the response.
        client_info.scope = " ".join(self.options.scopes)
        self.clients[client_info.client_id] = client_info

    async def _fetch_client_metadata_document(self, url: str) -> OAuthClientInformationFull | None:
        """Client ID Metadata Document: the client_id is an URL serving the client's metadata."""
        if url in self.cimd_clients:
            return self.cimd_clients[url]
        try:
            async with httpx2.AsyncClient(timeout=5, follow_redirects=False) as http:
                response = await http.get(url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                return None
            document = response.json()
            if not isinstance(document, dict) or document.get("client_id") != url:
                return None
            metadata = OAuthClientMetadata.model_validate({k: v for k, v in document.items() if k != "client_id"})
        except (httpx2.HTTPError, ValueError, ValidationError):
            return None
        client = OAuthClientInformationFull.model_validate(
            {
                **metadata.model_dump(),
                "client_id": url,
                "token_endpoint_auth_method": "none",
                "scope": " ".join(self.options.scopes),
            }
        )
        self.cimd_clients[url] = client
        return client

    # --- authorization ---------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and not same_resource(params.resource, self.options.resource):
            raise AuthorizeError(
                error="invalid_target",
                error_description=f"unknown resource {params.resource!r}; this server is {self.options.resource}",
            )
        if self.options.auto_approve:
            return self.approve(client, params)
        txn = secrets.token_urlsafe(24)
        self.pending[txn] = PendingConsent(client=client, params=params, created_at=time.time())
        return f"{self.options.base_url}/consent?txn={txn}"

    def take_pending(self, txn: str) -> PendingConsent | None:
        pending = self.pending.pop(txn, None)
        if pending is None or pending.created_at + AUTH_CODE_LIFETIME < time.time():
            return None
        return pending

    def peek_pending(self, txn: str) -> PendingConsent | None:
        pending = self.pending.get(txn)
        if pending is None or pending.created_at + AUTH_CODE_LIFETIME < time.time():
            return None
        return pending

    def approve(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32),
            scopes=params.scopes if params.scopes is not None else list(self.options.required_scopes),
            expires_at=time.time() + AUTH_CODE_LIFETIME,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource or self.options.resource,
            subject="test-user",
        )
        self.codes[code.code] = code
        self.stats["codes_issued"] += 1
        self.stats["consents_approved"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state, iss=self._iss())

    def deny(self, params: AuthorizationParams) -> str:
        self.stats["consents_denied"] += 1
        return construct_redirect_uri(
            str(params.redirect_uri),
            error="access_denied",
            error_description="The resource owner denied the request",
            state=params.state,
            iss=self._iss(),
        )

    def _iss(self) -> str | None:
        return self.options.issuer if self.options.iss else None

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        if code is None or code.client_id != client.client_id:
            return None
        return code

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        # single use (RFC 6749 §4.1.2)
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            client.client_id,
            access_scopes=authorization_code.scopes,
            refresh_scopes=authorization_code.scopes,
            resource=authorization_code.resource,
            subject=authorization_code.subject,
        )

    # --- tokens ---------------------------------------------------------------------

    def _issue(
        self,
        client_id: str,
        *,
        access_scopes: list[str],
        refresh_scopes: list[str],
        resource: str | None,
        subject: str | None,
    ) -> OAuthToken:
        now = int(time.time())
        access = AccessToken(
            token=f"at-{secrets.token_urlsafe(32)}",
            client_id=client_id,
            scopes=access_scopes,
            expires_at=now + self.options.token_lifetime,
            resource=resource,
            subject=subject,
            claims={"iss": self.options.issuer},
        )
        refresh = RefreshToken(
            token=f"rt-{secrets.token_urlsafe(32)}",
            client_id=client_id,
            scopes=refresh_scopes,
            expires_at=now + self.options.refresh_token_lifetime if self.options.refresh_token_lifetime else None,
            resource=resource,
            subject=subject,
        )
        self.access_tokens[access.token] = access
        self.refresh_tokens[refresh.token] = refresh
        self.pair_of_access[access.token] = refresh.token
        self.pair_of_refresh[refresh.token] = access.token
        self.stats["tokens_issued"] += 1
        return OAuthToken(
            access_token=access.token,
            token_type="Bearer",
            expires_in=self.options.token_lifetime,
            scope=" ".join(access_scopes),
            refresh_token=refresh.token,
        )

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        if token is None or token.client_id != client.client_id:
            return None
        return token

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotation: the presented refresh token and the access token issued with it die here.
        self._drop_refresh(refresh_token.token)
        self.stats["refreshes"] += 1
        return self._issue(
            client.client_id,
            access_scopes=scopes,
            refresh_scopes=refresh_token.scopes,
            resource=refresh_token.resource,
            subject=refresh_token.subject,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access_tokens.get(token)
        if access is None:
            return None
        if access.expires_at is not None and access.expires_at <= time.time():
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        drop = self._drop_access if isinstance(token, AccessToken) else self._drop_refresh
        self.stats["revocations"] += drop(token.token)

    def revoke_all(self) -> int:
        revoked = len(self.access_tokens) + len(self.refresh_tokens)
        self.access_tokens.clear()
        self.refresh_tokens.clear()
        self.pair_of_access.clear()
        self.pair_of_refresh.clear()
        self.stats["revocations"] += revoked
        self.stats["revoke_all_calls"] += 1
        return revoked

    def _drop_access(self, token: str) -> int:
        """Remove an access token and its refresh token; returns how many tokens went."""
        dropped = int(self.access_tokens.pop(token, None) is not None)
        refresh = self.pair_of_access.pop(token, None)
        if refresh is not None:
            self.pair_of_refresh.pop(refresh, None)
            dropped += int(self.refresh_tokens.pop(refresh, None) is not None)
        return dropped

    def _drop_refresh(self, token: str) -> int:
        dropped = int(self.refresh_tokens.pop(token, None) is not None)
        access = self.pair_of_refresh.pop(token, None)
        if access is not None:
            self.pair_of_access.pop(access, None)
            dropped += int(self.access_tokens.pop(access, None) is not None)
        return dropped

    # --- admin ----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        now = time.time()
        return {
            "issuer": self.options.issuer,
            "resource": self.options.resource,
            "clients_registered": len(self.clients),
            "cimd_clients": len(self.cimd_clients),
            **self.stats,
            "active_access_tokens": sum(
                1 for t in self.access_tokens.values() if t.expires_at is None or t.expires_at > now
            ),
            "active_refresh_tokens": len(self.refresh_tokens),
            "pending_consents": len(self.pending),
            "last_authorize": self.last_authorize,
        }


def _looks_like_metadata_url(client_id: str) -> bool:
    parsed = urlparse(client_id)
    if not parsed.netloc or parsed.path in ("", "/"):
        return False
    # https as the CIMD draft requires; plain http only on loopback, so tests can serve a document.
    return parsed.scheme == "https" or (parsed.scheme == "http" and parsed.hostname in LOOPBACK_HOSTS)
