"""The host's credential storage for the SDK's OAuth provider, and the provider per server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.utils import timezone
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from hostapp.catalog.models import Server
from hostapp.core.batching import Batcher, with_session
from hostapp.mcp.config import ServerConfig
from hostapp.mcp.oauth import Challenge, HostOAuth

from .models import Credential

logger = logging.getLogger(__name__)

T = TypeVar("T")

CALLBACK_PATH = "/oauth/callback/"
CLIENT_METADATA_PATH = "/oauth/client-metadata.json"


def public_base_url() -> str:
    """Where people and authorization servers reach this host (PATCHBAY_PUBLIC_URL)."""
    return (settings.PATCHBAY_PUBLIC_URL or "http://127.0.0.1:8000").rstrip("/")


def default_redirect_uri() -> str:
    return public_base_url() + CALLBACK_PATH


def client_metadata_url() -> str | None:
    """The Client ID Metadata Document's URL, when the host is public over HTTPS (the
    spec's condition for using one); else the host registers itself dynamically."""
    base = public_base_url()
    return base + CLIENT_METADATA_PATH if base.startswith("https://") else None


def client_metadata(redirect_uri: str, scope: str | None = None) -> OAuthClientMetadata:
    return OAuthClientMetadata(
        client_name="Patchbay",
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope=scope or None,
        software_id="dev.patchbay",
    )


async def _db(fn: Callable[[], T]) -> T:
    """Run database work from an event loop, on a worker thread that keeps no session."""

    def run() -> T:
        close_old_connections()
        try:
            return fn()
        finally:
            connection.close()

    return await sync_to_async(run, thread_sensitive=False)()


# The credential reads (one per HTTP connection a pool opens: a hundred servers connecting
# at once make a hundred) run on one thread per process that keeps its database session
# between them: opening a session costs more than the read (on SQLite about 1.5 ms of CPU,
# on PostgreSQL a new server process). It closes the session when idle for READ_IDLE_CLOSE
# seconds, and after an error. Writes keep to `_db`: one that waits for a lock must not hold
# up the reads.
READ_IDLE_CLOSE = 2.0

_Read = tuple[Callable[[], Any], "concurrent.futures.Future[Any]"]


def _run_reads(reads: list[_Read]) -> None:
    for fn, future in reads:
        if not future.set_running_or_notify_cancel():
            continue
        for attempt in (1, 2):
            try:
                result = fn()
            except (OperationalError, InterfaceError) as exc:
                connection.close()  # a session the database dropped (a restart): once more on a new one
                if attempt == 2:
                    future.set_exception(exc)
                continue
            except BaseException as exc:  # boundary: the reader's caller gets it
                connection.close()
                future.set_exception(exc)
            else:
                future.set_result(result)
            break


reader: Batcher[_Read] = with_session(
    "credential-reads", _run_reads, window=lambda: 0.0, limit=64, idle=READ_IDLE_CLOSE
)


async def _read(fn: Callable[[], T]) -> T:
    """Run a database read from an event loop, on the reader thread (its session kept)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    reader.submit((fn, future))
    return await asyncio.wrap_future(future)


class DatabaseStore:
    """`hostapp.mcp.oauth.CredentialStore` over the `Credential` row of one server.

    ``interactive`` stores are the Connect flow's: they start from no token (a new consent
    is the point) and mark the server connected when the token arrives.
    """

    def __init__(self, server_name: str, *, redirect_uri: str, interactive: bool = False, user_id: int | None = None):
        self.server_name = server_name
        self.redirect_uri = redirect_uri
        self.interactive = interactive
        self.user_id = user_id

    def _locked_credential(self) -> Credential:
        """The server's credential row, created if need be, locked for this transaction."""
        server = Server.objects.get(name=self.server_name)
        credential, _ = Credential.objects.select_for_update().get_or_create(server=server)
        return credential

    # -- tokens ---------------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        return (await self.load())[0]

    async def set_tokens(self, tokens: OAuthToken) -> None:
        data = tokens.model_dump(mode="json", exclude_none=True)

        def write() -> None:
            with transaction.atomic():
                credential = self._locked_credential()
                refreshing = not self.interactive and credential.tokens is not None
                credential.tokens = data
                credential.scope = tokens.scope or ""
                now = timezone.now()
                credential.expires_at = now + timedelta(seconds=int(tokens.expires_in)) if tokens.expires_in else None
                if refreshing:
                    credential.refreshed_at = now
                    credential.refreshes += 1
                credential.status = Credential.CONNECTED
                credential.reason = ""
                if self.interactive:
                    credential.required_scope = ""
                    credential.connected_at = now
                    credential.connected_by_id = self.user_id
                credential.save()

        await _db(write)
        logger.info("oauth: %s tokens %s", self.server_name, "refreshed" if not self.interactive else "received")

    # -- the registration -----------------------------------------------------------------

    async def load(self) -> tuple[OAuthToken | None, OAuthClientInformationFull | None, dict[str, Any]]:
        """Tokens (none for an interactive store: a new consent is the point), registration
        and state, from one read of the server and its credential."""

        def read() -> tuple[Any, ...]:
            # One query, no model instances: every HTTP connection a pool opens reads this.
            return Server.objects.values_list(
                "oauth_client_id", "oauth_client_secret", "credential__tokens", "credential__client_info",
                "credential__learned",
            ).get(name=self.server_name)  # fmt: skip

        client_id, client_secret, tokens, info, learned = await _read(read)
        if self.interactive:
            tokens = None
        state = dict(learned or {})
        return (
            (OAuthToken.model_validate(tokens) if tokens else None),
            self._client_info(client_id, client_secret, info),
            state,
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return (await self.load())[1]

    def _client_info(
        self, client_id: str, client_secret: str, info: dict[str, Any] | None
    ) -> OAuthClientInformationFull | None:
        if client_id:  # pre-registered: configuration wins
            secret = client_secret or None
            return OAuthClientInformationFull(
                client_id=client_id,
                client_secret=secret,
                redirect_uris=[self.redirect_uri],  # type: ignore[list-item]
                token_endpoint_auth_method="client_secret_post" if secret else "none",
                grant_types=["authorization_code", "refresh_token"],
            )
        if not info:
            return None
        registered = OAuthClientInformationFull.model_validate(info)
        if self.interactive and self.redirect_uri not in [str(u) for u in registered.redirect_uris or []]:
            return None  # registered with another callback URL: register again
        return registered

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        data = client_info.model_dump(mode="json", exclude_none=True)

        def write() -> None:
            with transaction.atomic():
                credential = self._locked_credential()
                credential.client_info = data
                credential.save(update_fields=["client_info", "updated_at"])

        await _db(write)

    # -- what the provider learned ---------------------------------------------------------

    async def set_state(self, state: dict[str, Any]) -> None:
        def write() -> None:
            with transaction.atomic():
                credential = self._locked_credential()
                credential.learned = {**credential.learned, **{k: v for k, v in state.items() if v is not None}}
                credential.save(update_fields=["learned", "updated_at"])

        await _db(write)

    async def needs_authorization(self, challenge: Challenge) -> None:
        if self.interactive:
            return  # the flow itself goes on to ask the person

        def write() -> bool:
            with transaction.atomic():
                credential = self._locked_credential()
                changed = credential.status != Credential.NEEDS_AUTHORIZATION
                credential.status = Credential.NEEDS_AUTHORIZATION
                credential.reason = challenge.describe()
                if challenge.status == 403 and challenge.scope:
                    credential.required_scope = challenge.scope
                credential.save()
                return changed

        if await _db(write):
            logger.warning("oauth: %s needs authorization: %s", self.server_name, challenge.describe())


def auth_for(config: ServerConfig) -> HostOAuth | None:
    """The pool's auth for one HTTP server: the stored token, refreshed; never a person."""
    if config.transport == "stdio" or any(name.lower() == "authorization" for name in config.headers):
        return None  # a configured Authorization header is the user's choice
    redirect_uri = default_redirect_uri()
    return HostOAuth(
        config.url,
        client_metadata(redirect_uri, config.oauth_scope),
        DatabaseStore(config.name, redirect_uri=redirect_uri),
        interactive=False,
        refresh_margin=settings.PATCHBAY_OAUTH_REFRESH_MARGIN,
    )
