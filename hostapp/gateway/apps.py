from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "hostapp.gateway"
    label = "gateway"
    verbose_name = "Agents' endpoint"
