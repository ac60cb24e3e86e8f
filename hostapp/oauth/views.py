from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from hostapp.catalog.models import Server
from hostapp.core.http import staff_required

from . import flows
from .models import AuthorizationFlow
from .store import CALLBACK_PATH, client_metadata_url, default_redirect_uri


def _redirect_uri(request: HttpRequest) -> str:
    """The callback URL: PATCHBAY_PUBLIC_URL's when set, else the address the browser used."""
    if settings.PATCHBAY_PUBLIC_URL:
        return default_redirect_uri()
    return request.build_absolute_uri(CALLBACK_PATH)


@require_POST
@staff_required
def connect(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server, name=name)
    try:
        flow = flows.start(server, request.user.pk, _redirect_uri(request))
    except flows.ConnectError as exc:
        messages.error(request, str(exc))
        return redirect("server", name=name)
    if flow.status == AuthorizationFlow.WAITING and urlsplit(flow.authorization_url).scheme in ("http", "https"):
        return redirect(flow.authorization_url)
    if flow.status == AuthorizationFlow.DONE:
        messages.success(request, f"{name} is connected.")
    else:
        messages.error(request, f"Could not connect {name}: {flow.error or 'the authorization did not start'}")
    return redirect("server", name=name)


@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    params = request.GET
    flow = flows.receive(
        params.get("state", ""),
        request.user.pk,
        code=params.get("code", ""),
        iss=params.get("iss", ""),
        error=" ".join(filter(None, [params.get("error", ""), params.get("error_description", "")])),
    )
    if flow is None:
        return render(
            request,
            "oauth/callback_unknown.html",
            {"reason": "This authorization is unknown, was started by someone else, or has ended already."},
            status=400,
        )
    flow = flows.wait_for_end(flow)
    name = flow.server.name
    if flow.status == AuthorizationFlow.DONE:
        messages.success(request, f"{name} is connected.")
    elif flow.status == AuthorizationFlow.FAILED:
        messages.error(request, f"Could not connect {name}: {flow.error}")
    else:
        messages.info(request, f"{name}: the authorization is still being completed.")
    return redirect("server", name=name)


@require_POST
@staff_required
def disconnect(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server, name=name)
    outcome = flows.disconnect(server)
    messages.success(request, f"{name}: {outcome}.")
    return redirect("server", name=name)


@login_not_required
@require_GET
def client_metadata(request: HttpRequest) -> HttpResponse:
    """The Client ID Metadata Document: who the host is, for authorization servers that
    accept a URL as client id (served only when the host is public over HTTPS)."""
    url = client_metadata_url()
    if url is None:
        return JsonResponse({"error": "not_found"}, status=404)
    return JsonResponse(
        {
            "client_id": url,
            "client_name": "Patchbay",
            "redirect_uris": [default_redirect_uri()],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )
