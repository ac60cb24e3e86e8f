from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("servers/<slug:name>/connect/", views.connect, name="server_connect"),
    path("servers/<slug:name>/disconnect/", views.disconnect, name="server_disconnect"),
    path("oauth/callback/", views.callback, name="oauth_callback"),
    path("oauth/client-metadata.json", views.client_metadata, name="oauth_client_metadata"),
]
