from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "hostapp.core"
    label = "core"
    verbose_name = "Patchbay"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
