from __future__ import annotations

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "hostapp.outbox"
    label = "outbox"
    verbose_name = "Outbox"

    def ready(self) -> None:
        # Imported here, not at the top: models load after the app configs.
        from hostapp.calls import life

        from .actions import on_delivery, on_resumed

        # Calls made or approved for delivery come to the outbox in their own transaction.
        life.delivery.connect(on_delivery, sender=None, dispatch_uid="outbox.enqueue")
        life.resumed.connect(on_resumed, sender=None, dispatch_uid="outbox.resume")
