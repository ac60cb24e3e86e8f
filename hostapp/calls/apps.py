from __future__ import annotations

from django.apps import AppConfig


class CallsConfig(AppConfig):
    name = "hostapp.calls"
    label = "calls"
    verbose_name = "Calls"
