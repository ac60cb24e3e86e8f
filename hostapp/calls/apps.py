from __future__ import annotations

from django.apps import AppConfig


class CallsConfig(AppConfig):
    name = "hostapp.calls"
    label = "calls"
    verbose_name = "Calls"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from .models import Rule

        # Rules change what the policy decides: the agents' endpoint forgets what it decided.
        post_save.connect(_rule_changed, sender=Rule, dispatch_uid="calls.rule_saved")
        post_delete.connect(_rule_changed, sender=Rule, dispatch_uid="calls.rule_deleted")


def _rule_changed(sender: type, instance: object, **kwargs: object) -> None:
    from hostapp.core.events import send_event_on_commit

    send_event_on_commit("policy.changed", {"server": getattr(instance, "server_name", "")})
