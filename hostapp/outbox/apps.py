from __future__ import annotations

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "hostapp.outbox"
    label = "outbox"
    verbose_name = "Outbox"
