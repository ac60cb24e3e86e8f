from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from hostapp.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("", include("hostapp.dashboard.urls")),
    path("", include("hostapp.catalog.urls")),
    path("", include("hostapp.calls.urls")),
    path("", include("hostapp.outbox.urls")),
    path("", include("hostapp.gateway.urls")),
    path("", include("hostapp.oauth.urls")),
]

# Branded error pages: 404.html through Django's own view (with the navigation); 500 here.
handler500 = "hostapp.dashboard.views.server_error"
