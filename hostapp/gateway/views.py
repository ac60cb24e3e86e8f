from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from hostapp.catalog.models import Server
from hostapp.core import crypto
from hostapp.core.http import staff_required

from . import tokens
from .agent_catalog import BYTES_PER_TOKEN, costs, load_catalog
from .agent_view import AgentView
from .models import AgentToken

# The token just created, kept in the session (encrypted, as every stored secret) from the
# POST that made it to the one page that shows it: a reload shows the page, never the token
# again, and never sends the form again.
NEW_TOKEN_KEY = "gateway.new_token"
CLASS_CHOICES = [("", "every class"), ("read_only", "read-only"), ("write", "write"), ("destructive", "destructive")]


def endpoint_url(request: HttpRequest) -> str:
    """The agents' endpoint: under PATCHBAY_PUBLIC_URL when set, else the address the browser used."""
    if settings.PATCHBAY_PUBLIC_URL:
        return settings.PATCHBAY_PUBLIC_URL.rstrip("/") + "/mcp"
    return request.build_absolute_uri("/mcp")


@staff_required
def agents(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _create(request)
    new_token = _take_new_token(request)
    endpoint = endpoint_url(request)
    tokens_shown = list(AgentToken.objects.order_by("revoked_at", "name"))
    catalog = load_catalog()
    for agent in tokens_shown:
        agent.costs = costs(catalog.listed(agent.info))  # type: ignore[attr-defined]
        agent.total_bytes = sum(c.bytes for c in agent.costs)  # type: ignore[attr-defined]
        agent.total_tokens = sum(c.tokens for c in agent.costs)  # type: ignore[attr-defined]
    context = {
        "tokens": tokens_shown,
        "servers": Server.objects.order_by("name").values_list("name", flat=True),
        "new_token": new_token,
        "snippets": tokens.client_snippets(endpoint, new_token["token"]) if new_token else [],
        "endpoint": endpoint,
        "bytes_per_token": BYTES_PER_TOKEN,
        "class_choices": CLASS_CHOICES,
    }
    response = render(request, "gateway/agents.html", context)
    if new_token:
        # Not kept by the browser either: the back button does not show it again.
        response["Cache-Control"] = "no-store"
    return response


def _posted_view(request: HttpRequest) -> AgentView:
    """The view the form of a new token, or of a token's view, sent (TokenError if it cannot be)."""
    return tokens.make_view(
        request.POST.getlist("servers"),
        request.POST.get("tools", "").split(","),
        request.POST.get("exclude", "").split(","),
        request.POST.get("max_class", ""),
        no_prefix=bool(request.POST.get("no_prefix")),
    )


def _create(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "").strip()
    try:
        agent, token = tokens.create_token(name, user=request.user, view=_posted_view(request))
    except tokens.TokenError as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        request.session[NEW_TOKEN_KEY] = {"name": agent.name, "token": crypto.encrypt(token)}
        messages.success(request, f"Created a token for {agent.name}. Copy it now: it is not shown again.")
    return redirect("agents")


def _take_new_token(request: HttpRequest) -> dict[str, str] | None:
    """The token created by this session's last POST, once: it leaves the session as it is read."""
    kept = request.session.pop(NEW_TOKEN_KEY, None)
    if not kept:
        return None
    try:
        return {"name": kept["name"], "token": crypto.decrypt(kept["token"])}
    except crypto.SecretUnreadable:
        messages.error(
            request,
            f"The new token of {kept['name']} cannot be shown (the encryption key changed): revoke it and create another.",
        )
        return None


@require_POST
@staff_required
def edit_view(request: HttpRequest, name: str) -> HttpResponse:
    try:
        agent = tokens.update_view(name, _posted_view(request))
    except tokens.TokenError as exc:
        messages.error(request, f"The view of {name} is unchanged: {exc}")
    else:
        messages.success(request, f"{agent.name} now sees {agent.view.describe()}.")
    return redirect("agents")


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
