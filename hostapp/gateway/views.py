from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from hostapp.catalog.models import Server
from hostapp.core.http import staff_required

from . import tokens
from .models import AgentToken


@staff_required
def agents(request: HttpRequest) -> HttpResponse:
    new_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        servers = request.POST.getlist("servers")
        try:
            agent, new_token = tokens.create_token(name, servers, request.user)
        except tokens.TokenError as exc:
            messages.error(request, str(exc))
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        else:
            messages.success(request, f"Created a token for {agent.name}. Copy it now: it is not shown again.")
    context = {
        "tokens": AgentToken.objects.order_by("revoked_at", "name"),
        "servers": Server.objects.order_by("name").values_list("name", flat=True),
        "new_token": new_token,
        "endpoint": request.build_absolute_uri("/mcp"),
    }
    response = render(request, "gateway/agents.html", context)
    if new_token:
        response["Cache-Control"] = "no-store"
    return response


@require_POST
@staff_required
def revoke(request: HttpRequest, name: str) -> HttpResponse:
    try:
        tokens.revoke_token(name)
    except tokens.TokenError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Revoked the token of {name}.")
    return redirect("agents")
