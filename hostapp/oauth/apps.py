from __future__ import annotations

from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "hostapp.oauth"
    label = "oauth"
    verbose_name = "Server authorization (OAuth)"
