"""System checks: configuration mistakes reported with an id instead of a traceback."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def check_environment(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Report every mistake settings.py found while reading the environment."""
    return [checks.Error(msg, hint=hint, id=check_id) for check_id, msg, hint in settings.CONFIG_ERRORS]


@checks.register(checks.Tags.security, deploy=True)
def check_production(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Deployment checks of our own, next to Django's `check --deploy`."""
    found: list[checks.CheckMessage] = []
    if not os.environ.get("SECRET_KEY"):
        found.append(
            checks.Warning(
                "SECRET_KEY is not set: the key generated into the data directory is used.",
                hint="Set SECRET_KEY in the environment of every process (web, worker, beat) in production.",
                id="patchbay.W001",
            )
        )
    if settings.REDIS_EMBEDDED:
        found.append(
            checks.Warning(
                "REDIS_URL is not set: an embedded Redis is expected on the data directory's socket.",
                hint="Set REDIS_URL to a Redis server in production.",
                id="patchbay.W002",
            )
        )
    return found


@checks.register(checks.Tags.compatibility)
def check_outbox_lease(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A lease shorter than a delivery lets a second worker deliver while the first still waits."""
    lease = settings.PATCHBAY_OUTBOX_LEASE
    needed = settings.PATCHBAY_OUTBOX_CALL_TIMEOUT + 30
    if lease < needed:
        return [
            checks.Warning(
                f"PATCHBAY_OUTBOX_LEASE ({lease}s) is shorter than a delivery can take "
                f"(PATCHBAY_OUTBOX_CALL_TIMEOUT {settings.PATCHBAY_OUTBOX_CALL_TIMEOUT}s plus a connect).",
                hint=f"Set PATCHBAY_OUTBOX_LEASE to at least {needed}: a repeat is safe only with idempotency keys.",
                id="patchbay.W003",
            )
        ]
    return []
