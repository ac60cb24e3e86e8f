from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("outbox/", views.outbox, name="outbox"),
    path("outbox/dead/", views.dead_letters, name="dead_letters"),
    path("outbox/redrive/", views.redrive, name="outbox_redrive"),
    path("outbox/discard/", views.discard, name="outbox_discard"),
    path("outbox/<int:action_id>/", views.action_detail, name="outbox_action"),
    path("outbox/<int:action_id>/done/", views.mark_done, name="outbox_mark_done"),
]
