"""A server's OAuth credentials and the authorizations people start from the browser."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from hostapp.core.crypto import EncryptedJSONField, EncryptedTextField


class Credential(models.Model):
    """What the host holds to reach one HTTP server behind OAuth (never shown in full)."""

    NONE = "none"
    CONNECTED = "connected"
    NEEDS_AUTHORIZATION = "needs_authorization"
    STATUSES = [(NONE, "not connected"), (CONNECTED, "connected"), (NEEDS_AUTHORIZATION, "needs authorization")]

    server = models.OneToOneField("catalog.Server", on_delete=models.CASCADE, related_name="credential")
    status = models.CharField(max_length=24, choices=STATUSES, default=NONE)
    reason = models.TextField(blank=True, help_text="Why the server needs authorization again.")
    # Scopes a step-up challenge asked for: the next Connect asks for them too.
    required_scope = models.CharField(max_length=500, blank=True)
    tokens = EncryptedJSONField(null=True, default=None)
    client_info = EncryptedJSONField(null=True, default=None)
    # What the provider discovered: metadata and the token's expiry (nothing secret).
    learned = models.JSONField(default=dict, blank=True)
    scope = models.CharField(max_length=500, blank=True, help_text="Scopes granted.")
    expires_at = models.DateTimeField(null=True, blank=True)
    connected_at = models.DateTimeField(null=True, blank=True)
    connected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refreshes = models.PositiveIntegerField(default=0)
    # Changes on connect and disconnect: connections restart with the new credentials.
    stamp = models.CharField(max_length=40, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.server.name}: {self.get_status_display()}"

    @property
    def authorization_server(self) -> str:
        return str(
            self.learned.get("auth_server_url") or (self.learned.get("oauth_metadata") or {}).get("issuer") or ""
        )

    @property
    def client_id(self) -> str:
        return str((self.client_info or {}).get("client_id") or "")


class AuthorizationFlow(models.Model):
    """One Connect: from the click to the callback."""

    STARTING = "starting"
    WAITING = "waiting"  # the person is at the authorization server
    RECEIVED = "received"  # the callback arrived; the code is being exchanged
    DONE = "done"
    FAILED = "failed"
    STATUSES = [(s, s) for s in (STARTING, WAITING, RECEIVED, DONE, FAILED)]

    server = models.ForeignKey("catalog.Server", on_delete=models.CASCADE, related_name="authorizations")
    key = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=200, blank=True, db_index=True, help_text="The OAuth state parameter.")
    status = models.CharField(max_length=12, choices=STATUSES, default=STARTING)
    redirect_uri = models.CharField(max_length=500)
    authorization_url = models.TextField(blank=True)
    code = EncryptedTextField(blank=True)
    iss = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.server.name} ({self.status})"
