from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from hostapp.calls.policy import decide
from hostapp.core.http import safe_next, staff_required
from hostapp.mcp.config import ConfigError

from . import actions
from .forms import ServerForm
from .models import CLASS_CHOICES, Server, Tool, live_states
from .refreshes import queue_refresh, request_refresh
from .review import review
from .schema import schema_tree

CATALOG_PAGE_SIZE = 100


def _fragment(request: HttpRequest) -> bool:
    return request.GET.get("fragment") == "1"


# --- servers --------------------------------------------------------------------------


def server_list(request: HttpRequest) -> HttpResponse:
    servers = (
        Server.objects.select_related("credential")
        .defer("credential__tokens", "credential__client_info")
        .order_by("name")
        .listed()
    )
    refreshing = sum(1 for s in servers if s.refreshing)
    batch = [(s, s.refresh_requested_at) for s in servers if s.refresh_requested_at is not None]
    latest = max((requested_at for _, requested_at in batch), default=None)
    in_batch = [s for s, requested_at in batch if latest is not None and (latest - requested_at).total_seconds() < 30]
    progress = {"done": sum(1 for s in in_batch if not s.refreshing), "total": len(in_batch)} if refreshing else None
    template = "catalog/_server_rows.html" if _fragment(request) else "catalog/servers.html"
    return render(request, template, {"servers": servers, "progress": progress})


@staff_required
def server_import(request: HttpRequest) -> HttpResponse:
    """Import an `mcpServers` file (Claude Desktop, Cursor, VS Code) from the browser; the
    Servers page then shows the listing of the imported servers' tools as it progresses."""
    error = ""
    text = ""
    if request.method == "POST":
        upload = request.FILES.get("file")
        text = (
            upload.read(2 * 1024 * 1024 + 1).decode("utf-8", "replace") if upload else request.POST.get("document", "")
        )
        if len(text) > 2 * 1024 * 1024:
            error = "The file is larger than 2 MiB."
        else:
            try:
                result = actions.import_servers(json.loads(text))
            except json.JSONDecodeError as exc:
                error = f"Not JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}. Nothing was imported."
            except ConfigError as exc:
                error = f"Nothing was imported: server {exc.entry!r}, field {exc.field!r}: {exc.message}"
            else:
                names = result.created + result.updated + result.unchanged
                parts = [
                    f"{label} {', '.join(n)}"
                    for label, n in (
                        ("created", result.created),
                        ("updated", result.updated),
                        ("unchanged", result.unchanged),
                    )
                    if n
                ]
                request_refresh(names, reason="imported")
                messages.success(request, f"Imported {len(names)} server(s): {'; '.join(parts)}. Listing their tools…")
                return redirect("servers")
    return render(request, "catalog/server_import.html", {"error": error, "text": text})


@staff_required
def server_add(request: HttpRequest) -> HttpResponse:
    form = ServerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        config = form.config
        server = Server(name=config.name)
        _apply_config(server, config)
        actions.save_server(server, config_changed=True, trust_changed=False)
        queue_refresh(server.name, reason="added")
        messages.success(request, f"Added {server.name}; its tools are being listed.")
        return redirect("servers")
    return render(request, "catalog/server_form.html", {"form": form, "server": None, "cancel_url": reverse("servers")})


def _apply_config(server: Server, config: Any) -> None:
    server.transport = config.transport
    server.command = config.command
    server.args = list(config.args)
    server.env = dict(config.env)
    server.cwd = config.cwd or ""
    server.url = config.url
    server.headers = dict(config.headers)
    server.trusted = config.trusted
    server.enabled = config.enabled
    server.oauth_client_id = config.oauth_client_id
    server.oauth_client_secret = config.oauth_client_secret
    server.oauth_scope = config.oauth_scope


def server_detail(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server.objects.prefetch_related(live_states()).select_related("credential"), name=name)
    if request.method == "POST":
        if not request.user.is_staff:
            return HttpResponse("Only administrators can change servers.", status=403)
        form = ServerForm(request.POST, instance=server)
        if form.is_valid():
            before = server.to_config()
            _apply_config(server, form.config)
            after = server.to_config()
            actions.save_server(
                server,
                config_changed=before.fingerprint() != after.fingerprint() or before.enabled != after.enabled,
                trust_changed=before.trusted != after.trusted,
            )
            messages.success(request, f"Saved {server.name}.")
            return redirect("server", name=server.name)
    else:
        form = ServerForm(instance=server)
    tools = list(server.tools.order_by("exposed_name"))
    try:
        credential = server.credential  # the OAuth app's, if the server asked for authorization
    except ObjectDoesNotExist:
        credential = None
    context = {
        "server": server,
        "form": form,
        "tools": tools,
        "quarantined": sum(t.status == Tool.QUARANTINED for t in tools),
        # What it offers besides tools (hostapp/catalog/offers.py).
        "prompts": list(server.prompts.order_by("exposed_name")),
        "templates": list(server.resource_templates.order_by("uri_template")),
        "resources": list(server.resources.order_by("uri")[:500]),
        "credential": credential,
        # Authorization is shown (and Connect offered) where the server asked for it, or an
        # admin registered an OAuth client for it beforehand.
        "authorization": server.transport != Server.STDIO
        and (credential is not None or server.needs_authorization or bool(server.oauth_client_id)),
        "cancel_url": reverse("server", args=[server.name]),
    }
    return render(request, "catalog/server.html", context)


@require_POST
def server_refresh(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server, name=name)
    if request_refresh([server.name], reason=f"asked by {request.user}"):
        messages.info(request, f"Refreshing {server.name}…")
    else:
        messages.warning(request, f"A refresh of {server.name} is already on its way (or no worker can be reached).")
    return redirect(safe_next(request, "servers"))


@require_POST
def server_refresh_all(request: HttpRequest) -> HttpResponse:
    names = list(Server.objects.filter(enabled=True).values_list("name", flat=True))
    queued = request_refresh(names, reason=f"refresh all, asked by {request.user}")
    messages.info(request, f"Refreshing {queued} of {len(names)} servers…")
    return redirect("servers")


@require_POST
@staff_required
def server_enable(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server, name=name)
    enable = request.POST.get("enabled") == "1"
    actions.set_enabled(server, enable)
    if enable:
        queue_refresh(server.name, reason="enabled")
    messages.success(request, f"{'Enabled' if enable else 'Disabled'} {server.name}.")
    return redirect(safe_next(request, "servers"))


@require_POST
@staff_required
def server_delete(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(Server, name=name)
    actions.delete_server(server)
    messages.success(request, f"Removed {name} and its tools.")
    return redirect("servers")


# --- catalog ---------------------------------------------------------------------------------


def catalog(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    server = request.GET.get("server", "")
    cls = request.GET.get("class", "")
    status = request.GET.get("status", "")
    base = Tool.objects.all()
    if q:
        base = base.filter(
            Q(exposed_name__icontains=q)
            | Q(title__icontains=q)
            | Q(description__icontains=q)
            | Q(original_name__icontains=q)
        )
    tools = base
    if server:
        tools = tools.filter(server__name=server)
    if cls:
        tools = tools.filter(effective_class=cls)
    if status:
        tools = tools.filter(status=status)
    counts = tools.aggregate(
        total=Count("id"),
        read_only=Count("id", filter=Q(effective_class="read_only")),
        write=Count("id", filter=Q(effective_class="write")),
        destructive=Count("id", filter=Q(effective_class="destructive")),
        quarantined=Count("id", filter=Q(status=Tool.QUARANTINED)),
    )
    rows = tools.select_related("server").only(
        "exposed_name",
        "title",
        "description",
        "effective_class",
        "status",
        "quarantine_reason",
        "original_name",
        "server__name",
        "server__stale",
    )
    paginator = Paginator(rows, CATALOG_PAGE_SIZE)
    # The counts above already know the total: the paginator need not count again.
    paginator.count = counts["total"]
    page = paginator.get_page(request.GET.get("page"))
    context = {
        "tools": page.object_list,
        "page": page,
        "counts": counts,
        "q": q,
        "server": server,
        "cls": cls,
        "status": status,
        "server_names": Server.objects.order_by("name").values_list("name", flat=True),
        "class_choices": CLASS_CHOICES,
        "status_choices": Tool.STATUSES,
    }
    template = "catalog/_tool_rows.html" if _fragment(request) else "catalog/catalog.html"
    return render(request, template, context)


def tool_detail(request: HttpRequest, exposed_name: str) -> HttpResponse:
    tool = get_object_or_404(
        Tool.objects.select_related("server", "accepted_by", "override_by"), exposed_name=exposed_name
    )
    claimed = tool.annotations
    applied = actions.applied_annotations(tool)
    hints = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]
    context = {
        "tool": tool,
        "annotation_rows": [(h, claimed.get(h), applied.get(h)) for h in hints],
        "input_tree": schema_tree(tool.input_schema),
        "output_tree": schema_tree(tool.output_schema) if tool.output_schema else None,
        "definition_json": json.dumps(tool.definition, indent=2, sort_keys=True, ensure_ascii=False),
        "review": review(tool) if tool.status == Tool.QUARANTINED else None,
        "can_review": request.user.has_perm("catalog.review_tool"),
        "class_choices": CLASS_CHOICES,
        "decision": decide(tool),
        # The call form's own key (a repeated submit of it returns the first call).
        "submit_key": uuid.uuid4().hex,
    }
    return render(request, "catalog/tool.html", context)


@require_POST
@permission_required("catalog.review_tool", raise_exception=True)
def tool_accept(request: HttpRequest, exposed_name: str) -> HttpResponse:
    tool = get_object_or_404(Tool.objects.select_related("server"), exposed_name=exposed_name)
    if request.POST.get("definition_hash") != tool.definition_hash:
        messages.error(request, "The tool changed again while you were reviewing it; review the new definition.")
        return redirect("tool", exposed_name=exposed_name)
    actions.accept_tool(tool, request.user)
    messages.success(request, f"Accepted {tool.exposed_name}; it can be called again.")
    return redirect("tool", exposed_name=exposed_name)


def server_review(request: HttpRequest, name: str) -> HttpResponse:
    """Every quarantined tool of one server, each as its own page shows it, and one button
    that accepts them all: each at the definition shown here (a tool that changed again
    since the page was rendered is left quarantined, and said so)."""
    server = get_object_or_404(Server, name=name)
    tools = list(server.tools.filter(status=Tool.QUARANTINED).select_related("server").order_by("exposed_name"))
    if request.method == "POST":
        if not request.user.has_perm("catalog.review_tool"):
            return HttpResponse("You need the review permission to accept tools.", status=403)
        seen = dict(pair.partition(":")[::2] for pair in request.POST.getlist("seen"))
        accepted = [t for t in tools if seen.get(t.exposed_name) == t.definition_hash]
        for tool in accepted:
            actions.accept_tool(tool, request.user)
        if accepted:
            messages.success(request, f"Accepted {len(accepted)} tool{'s' if len(accepted) != 1 else ''} of {name}.")
        moved = [t.exposed_name for t in tools if t not in accepted and t.exposed_name in seen]
        if moved:
            messages.error(request, f"Changed again while you were reviewing, left to review: {', '.join(moved)}.")
        return redirect("server_review", name=name) if moved else redirect("server", name=name)
    context = {
        "server": server,
        "reviews": [(t, review(t)) for t in tools],
        "can_review": request.user.has_perm("catalog.review_tool"),
    }
    return render(request, "catalog/server_review.html", context)


@require_POST
@staff_required
def tool_class(request: HttpRequest, exposed_name: str) -> HttpResponse:
    tool = get_object_or_404(Tool.objects.select_related("server"), exposed_name=exposed_name)
    try:
        actions.set_class_override(tool, request.POST.get("class_override", ""))
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{tool.exposed_name} is now treated as {tool.get_effective_class_display()}.")
    return redirect("tool", exposed_name=exposed_name)


@require_POST
@staff_required
def tool_override(request: HttpRequest, exposed_name: str) -> HttpResponse:
    """An admin's name and description of the tool for agents (blank: the server's)."""
    tool = get_object_or_404(Tool.objects.select_related("server"), exposed_name=exposed_name)
    try:
        actions.set_override(
            tool, request.POST.get("agent_name", ""), request.POST.get("agent_description", ""), request.user
        )
    except actions.OverrideError as exc:
        messages.error(request, f"Not changed: {exc}")
    else:
        if tool.overridden:
            messages.success(request, f"Agents are now given {tool.name_for_agents} as an admin wrote it.")
        else:
            messages.success(request, f"Agents are given {tool.exposed_name} as its server describes it.")
    return redirect("tool", exposed_name=exposed_name)
