from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("agents/", views.agents, name="agents"),
    path("agents/<str:name>/view/", views.edit_view, name="agent_view"),
    path("agents/<str:name>/revoke/", views.revoke, name="agent_revoke"),
]
