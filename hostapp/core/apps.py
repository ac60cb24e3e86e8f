from __future__ import annotations

from django.apps import AppConfig

from . import checks  # noqa: F401  (registers the system checks)


class CoreConfig(AppConfig):
    name = "hostapp.core"
    label = "core"
    verbose_name = "Patchbay"
