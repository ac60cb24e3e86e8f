from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from hostapp.core.events import send_event_on_commit


class CallsConfig(AppConfig):
    name = "hostapp.calls"
    label = "calls"
    verbose_name = "Calls"

    def ready(self) -> None:
        from .models import Rule  # here, not at the top: models load after the app configs

        # Rules change what the policy decides: the agents' endpoint forgets what it decided.
        post_save.connect(_rule_changed, sender=Rule, dispatch_uid="calls.rule_saved")
        post_delete.connect(_rule_changed, sender=Rule, dispatch_uid="calls.rule_deleted")


def _rule_changed(sender: type, instance: object, **kwargs: object) -> None:
    send_event_on_commit("policy.changed", {"server": getattr(instance, "server_name", "")})
