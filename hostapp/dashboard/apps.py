from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """What shows every app together: home, readiness, metrics, the navigation's counts, the
    live websocket, and the `run` and `mcp` commands. No app imports it."""

    name = "hostapp.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"
