"""Websocket routes of every app."""

from __future__ import annotations

from django.urls import path

from hostapp.dashboard.consumers import LiveConsumer

websocket_urlpatterns = [
    path("ws/live/", LiveConsumer.as_asgi()),
]
