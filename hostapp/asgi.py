"""ASGI entry point: pages and the JSON API over HTTP, live updates over websockets."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")
# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from hostapp.core import identity  # noqa: E402
from hostapp.core.gc_tuning import tune_gc  # noqa: E402
from hostapp.gateway.asgi import GatewayApp, Scope, mcp_path  # noqa: E402
from hostapp.routing import websocket_urlpatterns  # noqa: E402

identity.set_role(identity.WEB)
gateway_app = GatewayApp()
# The web process lists tools too (a refresh button, the agents' endpoint).
tune_gc()


async def http_app(scope: Scope, receive: Any, send: Any) -> None:
    """/mcp goes to the agents' endpoint; everything else to Django."""
    if mcp_path(scope):
        await gateway_app(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
