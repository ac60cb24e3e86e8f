from __future__ import annotations

import base64
import binascii
import json
import re
import unicodedata
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from mcp import InvalidUriTemplate, UriTemplate

from hostapp.calls import reads
from hostapp.calls.actions import Requester
from hostapp.calls.policy import decide
from hostapp.core.http import safe_next, staff_required
from hostapp.mcp.config import ConfigError
from hostapp.mcp.sanitize import clean_text, removed_characters

from . import actions
from .forms import PromptArgumentsForm, ServerForm, TemplateVariablesForm
from .models import (
    CLASS_CHOICES,
    PROMPT_PINNED_KEYS,
    TEMPLATE_PINNED_KEYS,
    Offer,
    Prompt,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
    live_states,
)
from .offers import accept_offer
from .refreshes import queue_refresh, request_refresh
from .review import Review, changes, review
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
    # What it offers besides tools (hostapp/catalog/offers.py).
    prompts = list(server.prompts.order_by("exposed_name"))
    templates = list(server.resource_templates.order_by("uri_template"))
    try:
        credential = server.credential  # the OAuth app's, if the server asked for authorization
    except ObjectDoesNotExist:
        credential = None
    context = {
        "server": server,
        "form": form,
        "tools": tools,
        "quarantined": sum(t.status == Tool.QUARANTINED for t in tools),
        "prompts": prompts,
        "templates": templates,
        "offers_quarantined": sum(o.status == Offer.QUARANTINED for o in [*prompts, *templates]),
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
    """Every quarantined tool, prompt and resource template of one server, each as its own
    page shows it, and one button that accepts them all: each at the definition shown here
    (one that changed again since the page was rendered is left quarantined, and said so)."""
    server = get_object_or_404(Server, name=name)
    tools = list(server.tools.filter(status=Tool.QUARANTINED).select_related("server").order_by("exposed_name"))
    prompts = list(server.prompts.filter(status=Offer.QUARANTINED).select_related("server").order_by("exposed_name"))
    templates = list(
        server.resource_templates.filter(status=Offer.QUARANTINED).select_related("server").order_by("uri_template")
    )
    offers: list[tuple[str, Offer]] = [("prompt", p) for p in prompts] + [("template", t) for t in templates]
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
        # A prompt or template as `kind:pk:hash` (a prompt and a tool may share a name).
        seen_offers = dict(value.rpartition(":")[::2] for value in request.POST.getlist("seen_offer"))
        taken = [(kind, o) for kind, o in offers if seen_offers.get(f"{kind}:{o.pk}") == o.definition_hash]
        for _, offer in taken:
            accept_offer(offer, request.user)
        if taken:
            n_prompts = sum(kind == "prompt" for kind, _ in taken)
            words = [_counted(n_prompts, "prompt"), _counted(len(taken) - n_prompts, "resource template")]
            messages.success(request, f"Accepted {' and '.join(w for w in words if w)} of {name}.")
        moved += [_offer_label(o) for kind, o in offers if (kind, o) not in taken and f"{kind}:{o.pk}" in seen_offers]
        if moved:
            messages.error(request, f"Changed again while you were reviewing, left to review: {', '.join(moved)}.")
        return redirect("server_review", name=name) if moved else redirect("server", name=name)
    context = {
        "server": server,
        "reviews": [(t, review(t)) for t in tools],
        "offer_reviews": [(kind, o, offer_review(o), _shown_offer(o)) for kind, o in offers],
        "total": len(tools) + len(offers),
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


# --- prompts, resources and resource templates -----------------------------------------------
#
# Listed and pinned beside the tools (hostapp/catalog/offers.py); every read of one goes
# through hostapp/calls/reads.py, which checks it, sends it and puts it on record. What comes
# back is shown here and never stored: text up to PATCHBAY_RESULT_DISPLAY_CAP characters a
# page (as call results are), images and audio inline up to INLINE_MEDIA_CAP each, anything
# else downloaded (the transport refuses a message over the server's max_message_bytes).

OFFERS_PAGE_SIZE = 100
INLINE_MEDIA_CAP = 2 * 1024 * 1024  # decoded bytes of one image or sound shown inline
MAX_PARTS = 100  # of a resource read, or messages of a prompt, shown
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})  # never SVG: it can script
AUDIO_TYPES = frozenset({"audio/wav", "audio/x-wav", "audio/mpeg", "audio/ogg", "audio/webm", "audio/mp4"})
# A download keeps the type its server gave when a browser runs nothing of that type; any
# other goes as application/octet-stream (text as text/plain). Always as an attachment.
INERT_TYPES = IMAGE_TYPES | AUDIO_TYPES | {"text/plain", "text/csv", "text/markdown", "application/json"}
# Shown as text when sent as a blob (and valid UTF-8): text/*, these, and +json, +xml.
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/yaml", "application/x-ndjson"})
_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_FILENAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
OFFER_LABELS = {"arguments": "Arguments", "uriTemplate": "URI template", "mimeType": "MIME type"}


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}" if n else ""


def _offer_label(offer: Offer) -> str:
    return offer.exposed_name if isinstance(offer, Prompt) else offer.uri_template  # type: ignore[attr-defined]


def offer_review(offer: Offer) -> Review:
    """What the review box of a quarantined prompt or template shows: a new one's definition
    (its page shows it), a changed one's fields side by side, the pinned ones first."""
    if not offer.pinned_definition:
        return Review(new=True, changes=[], input_tree=[], annotations={})
    order = PROMPT_PINNED_KEYS if isinstance(offer, Prompt) else TEMPLATE_PINNED_KEYS
    found = changes(offer.pinned_definition, offer.definition or {})
    for change in found:
        change.label = OFFER_LABELS.get(change.name, change.label)
    found.sort(key=lambda c: order.index(c.name) if c.name in order else len(order))
    return Review(new=False, changes=found, input_tree=[], annotations={})


def _argument_rows(prompt: Prompt) -> list[dict[str, Any]]:
    """A prompt's arguments as pages show them: the server's texts cleaned."""
    return [
        {
            "name": clean_text(a.get("name"), 200),
            "required": bool(a.get("required")),
            "description": clean_text(a.get("description")),
        }
        for a in prompt.arguments
    ]


def _shown_offer(offer: Offer) -> dict[str, Any]:
    """What a review of a new prompt or template shows of it besides its cleaned texts."""
    if isinstance(offer, Prompt):
        return {"arguments": _argument_rows(offer)}
    return {"uri": clean_text(offer.uri_template, 2000)}  # type: ignore[attr-defined]


def _hidden(ch: str) -> bool:
    return ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp")


def _shown_json(value: Any) -> str:
    """JSON as a server sent it, indented; invisible and direction controls written as their
    escapes (still the same JSON), so that it reads as what it is."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return "".join(json.dumps(ch)[1:-1] if _hidden(ch) else ch for ch in text)


class _Budget:
    """Characters of text a page still shows."""

    def __init__(self) -> None:
        self.left = int(settings.PATCHBAY_RESULT_DISPLAY_CAP)


def _mime(value: Any) -> str:
    """A MIME type as pages and downloads use it: lowercase, no parameters; "" if it is none."""
    mime = str(value or "").split(";", 1)[0].strip().lower()
    return mime if _MIME.fullmatch(mime) else ""


def _textual(mime: str) -> bool:
    return mime.startswith("text/") or mime in TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _text_block(text: str, mime: str, budget: _Budget) -> dict[str, Any]:
    """Text, JSON pretty printed, cut to what the page still shows, cleaned as descriptions are."""
    kind = "text"
    if mime == "application/json" or mime.endswith("+json"):
        try:
            text, kind = json.dumps(json.loads(text), indent=2, ensure_ascii=False), "json"
        except (ValueError, RecursionError):
            pass  # not JSON after all: shown as it came
    shown = text[: max(0, budget.left)]
    budget.left -= len(shown)
    return {
        "type": kind,
        "text": clean_text(shown, len(shown) + 1),
        "size": len(text),
        "truncated": len(shown) < len(text),
        "removed": removed_characters(shown),
    }


def _decoded(data: Any) -> tuple[str, bytes] | None:
    """Base64 as sent (line breaks dropped) and the bytes it stands for; None if it is not base64."""
    text = "".join(str(data).split())
    try:
        return text, base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _media_block(data: str, raw: bytes, mime: str) -> dict[str, Any] | None:
    """An image or a sound shown inline: of a type that cannot script, and small enough."""
    media = "image" if mime in IMAGE_TYPES else "audio" if mime in AUDIO_TYPES else ""
    if not media or len(raw) > INLINE_MEDIA_CAP:
        return None
    # Checked as base64: nothing but its alphabet goes into the data: URL.
    return {"type": media, "mime": mime, "data": data, "size": len(raw)}


def _blob_block(data: Any, mime: str, budget: _Budget) -> dict[str, Any]:
    """A resource's base64 contents: an image or a sound inline, text declared as text shown
    as text, anything else a binary to download."""
    decoded = _decoded(data)
    if decoded is None:
        return {"type": "invalid", "mime": mime}
    text, raw = decoded
    media = _media_block(text, raw, mime)
    if media is not None:
        return media
    if _textual(mime):
        try:
            return {**_text_block(raw.decode("utf-8"), mime, budget), "from_blob": True}
        except UnicodeDecodeError:
            pass
    return {"type": "binary", "mime": mime, "size": len(raw), "too_large": mime in IMAGE_TYPES | AUDIO_TYPES}


def _contents_block(item: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    """One of a resource's contents: text or a blob."""
    mime = _mime(item.get("mimeType"))
    if isinstance(item.get("text"), str):
        return _text_block(item["text"], mime, budget)
    if "blob" in item:
        return _blob_block(item["blob"], mime, budget)
    return {"type": "other", "json": _shown_json(item)[:2000]}


def _message_block(content: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    """The content of a prompt's message, by its type (as the call result view shows one)."""
    kind = content.get("type")
    if kind == "text":
        return _text_block(str(content.get("text", "")), "text/plain", budget)
    if kind in ("image", "audio"):
        mime = _mime(content.get("mimeType"))
        decoded = _decoded(content.get("data", ""))
        if decoded is None:
            return {"type": "invalid", "mime": mime}
        media = _media_block(*decoded, mime)
        if media is not None and media["type"] == kind:
            return media
        size = len(decoded[1])
        return {
            "type": "binary",
            "mime": mime,
            "size": size,
            "claimed": kind,
            "too_large": media is None and size > INLINE_MEDIA_CAP,
        }
    if kind == "resource":
        resource = content["resource"] if isinstance(content.get("resource"), dict) else {}
        return {
            "type": "resource",
            "uri": str(resource.get("uri") or ""),
            "shown_uri": clean_text(resource.get("uri"), 2000),
            "mime": _mime(resource.get("mimeType")),
            "inner": _contents_block(resource, budget),
        }
    if kind == "resource_link":
        uri = str(content.get("uri") or "")
        return {
            "type": "resource_link",
            "uri": uri,
            "shown_uri": clean_text(uri, 2000),
            "name": clean_text(content.get("title") or content.get("name") or uri, 200),
            "description": clean_text(content.get("description")),
            "mime": _mime(content.get("mimeType")),
            "external": uri if uri.startswith("https://") else "",
        }
    return {"type": "other", "json": _shown_json(content)[:2000]}


def _link_listed(server: Server, blocks: list[dict[str, Any]]) -> None:
    """Embedded resources and links to resources the server lists link to their pages."""
    uris = {b["uri"] for b in blocks if b["type"] in ("resource", "resource_link") and b["uri"]}
    if not uris:
        return
    pages = dict(Resource.objects.filter(server=server, uri__in=uris).values_list("uri", "pk"))
    for block in blocks:
        if block.get("uri") in pages:
            block["href"] = reverse("resource", args=[pages[block["uri"]]])


def _items(result: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    items = (result or {}).get(key)
    return [i for i in items if isinstance(i, dict)][:MAX_PARTS] if isinstance(items, list) else []


def _prompt_messages(result: dict[str, Any] | None, server: Server) -> list[dict[str, Any]]:
    budget = _Budget()
    shown: list[dict[str, Any]] = []
    for message in _items(result, "messages"):
        content = message["content"] if isinstance(message.get("content"), dict) else {}
        shown.append({"role": clean_text(message.get("role"), 20), "block": _message_block(content, budget)})
    _link_listed(server, [m["block"] for m in shown])
    return shown


def _resource_parts(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    budget = _Budget()
    return [
        {
            "index": index,
            "uri": clean_text(item.get("uri"), 2000),
            "mime": _mime(item.get("mimeType")),
            "block": _contents_block(item, budget),
        }
        for index, item in enumerate(_items(result, "contents"))
    ]


def _download(result: dict[str, Any] | None, index: str) -> HttpResponse | None:
    """One part of a resource read, as an attachment of a type no browser runs; None if
    there is no such part (or its blob is not base64)."""
    items = _items(result, "contents")
    if not index.isdigit() or int(index) >= len(items):
        return None
    item = items[int(index)]
    mime = _mime(item.get("mimeType"))
    if isinstance(item.get("text"), str):
        body = item["text"].encode()
        content_type = f"{mime if mime in INERT_TYPES else 'text/plain'}; charset=utf-8"
    else:
        decoded = _decoded(item.get("blob", ""))
        if decoded is None:
            return None
        body = decoded[1]
        content_type = mime if mime in INERT_TYPES else "application/octet-stream"
    uri = str(item.get("uri") or "")
    name = _FILENAME_BAD.sub("_", uri.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])[:100].strip("._")
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name or "resource"}"'
    response["Content-Security-Policy"] = "sandbox"
    return response


def _read(request: HttpRequest, server: Server, uri: str) -> tuple[dict[str, Any], int, HttpResponse | None]:
    """Read `uri` of `server` for the person asking (on record: hostapp/calls/reads.py): what
    the page shows of it and the status to answer with, or the response of a download."""
    try:
        outcome = reads.read_resource(server, uri, Requester.for_user(request.user))
    except reads.ReadError as exc:
        return {"read_error": exc.message, "read": exc.read}, exc.status, None
    shown: dict[str, Any] = {"read": outcome.read, "read_uri": clean_text(uri, 4000)}
    if outcome.failure is not None:
        # The page worked; the server did not (a 5xx would be logged as the host's error).
        return {**shown, "read_failure": clean_text(outcome.failure.message, 2000)}, 200, None
    download = request.POST.get("download")
    if download is not None:
        response = _download(outcome.result, download)
        if response is not None:
            return shown, 200, response
        return {**shown, "read_error": "The server sent no such part to download."}, 404, None
    return {**shown, "parts": _resource_parts(outcome.result), "was_read": True}, 200, None


def _search(q: str, *fields: str) -> Q:
    found = Q()
    for name in fields:
        found |= Q(**{f"{name}__icontains": q})
    return found


def _list_page(
    request: HttpRequest, rows: QuerySet[Any], counts: dict[str, int], filters: dict[str, str]
) -> dict[str, Any]:
    """What the offer lists share: a page of `rows` (counted already), the filters as a query."""
    paginator = Paginator(rows, OFFERS_PAGE_SIZE)
    paginator.count = counts["total"]  # known: the paginator need not count again
    page = paginator.get_page(request.GET.get("page"))
    query = {k: v for k, v in filters.items() if v}
    return {
        "rows": list(page.object_list),
        "page": page,
        "counts": counts,
        **filters,
        "query": urlencode(query),
        "quarantined_query": urlencode({**query, "status": Offer.QUARANTINED}),
        "server_names": Server.objects.order_by("name").values_list("name", flat=True),
        "status_choices": Tool.STATUSES,
    }


def _offer_filters(request: HttpRequest, *names: str) -> dict[str, str]:
    return {name: request.GET.get(name, "").strip() for name in names}


def prompt_list(request: HttpRequest) -> HttpResponse:
    filters = _offer_filters(request, "q", "server", "status")
    prompts = Prompt.objects.all()
    if filters["q"]:
        prompts = prompts.filter(_search(filters["q"], "exposed_name", "original_name", "title", "description"))
    if filters["server"]:
        prompts = prompts.filter(server__name=filters["server"])
    if filters["status"]:
        prompts = prompts.filter(status=filters["status"])
    counts = prompts.aggregate(total=Count("id"), quarantined=Count("id", filter=Q(status=Offer.QUARANTINED)))
    rows = prompts.select_related("server").only(
        "exposed_name", "title", "description", "status", "quarantine_reason", "server__name", "server__stale"
    )
    context = _list_page(request, rows, counts, filters)
    template = "catalog/_prompt_rows.html" if _fragment(request) else "catalog/prompts.html"
    return render(request, template, context)


def template_list(request: HttpRequest) -> HttpResponse:
    filters = _offer_filters(request, "q", "server", "status")
    templates = ResourceTemplate.objects.all()
    if filters["q"]:
        templates = templates.filter(_search(filters["q"], "uri_template", "name", "title", "description"))
    if filters["server"]:
        templates = templates.filter(server__name=filters["server"])
    if filters["status"]:
        templates = templates.filter(status=filters["status"])
    counts = templates.aggregate(total=Count("id"), quarantined=Count("id", filter=Q(status=Offer.QUARANTINED)))
    rows = templates.select_related("server").only(
        "uri_template",
        "name",
        "title",
        "description",
        "mime_type",
        "status",
        "quarantine_reason",
        "server__name",
        "server__stale",
    )
    context = _list_page(request, rows, counts, filters)
    for row in context["rows"]:
        row.shown_uri = clean_text(row.uri_template, 2000)
    template = "catalog/_template_rows.html" if _fragment(request) else "catalog/templates.html"
    return render(request, template, context)


def resource_list(request: HttpRequest) -> HttpResponse:
    filters = _offer_filters(request, "q", "server", "mime")
    resources = Resource.objects.all()
    if filters["q"]:
        resources = resources.filter(_search(filters["q"], "uri", "name", "title", "description"))
    if filters["server"]:
        resources = resources.filter(server__name=filters["server"])
    if filters["mime"]:
        resources = resources.filter(mime_type=filters["mime"])
    counts = resources.aggregate(total=Count("id"))
    rows = resources.select_related("server").only(
        "uri", "name", "title", "description", "mime_type", "size", "server__name", "server__stale"
    )
    context = _list_page(request, rows, counts, filters)
    for row in context["rows"]:
        row.shown_uri = clean_text(row.uri, 2000)
    # The types to filter by (the first 100: a listing's types are few).
    context["mime_types"] = (
        Resource.objects.exclude(mime_type="")
        .order_by("mime_type")
        .values_list("mime_type", flat=True)
        .distinct()[:100]
    )
    template = "catalog/_resource_rows.html" if _fragment(request) else "catalog/resources.html"
    return render(request, template, context)


def _accept(request: HttpRequest, offer: Offer, label: str, url: str) -> HttpResponse:
    if request.POST.get("definition_hash") != offer.definition_hash:
        messages.error(request, f"{label} changed again while you were reviewing it; review the new definition.")
    else:
        accept_offer(offer, request.user)
        messages.success(request, f"Accepted {label}; it can be used now.")
    return redirect(url)


def _posted(
    offer: Offer, valid: bool, label: str, read: Callable[[], tuple[dict[str, Any], int, HttpResponse | None]]
) -> tuple[dict[str, Any], int, HttpResponse | None]:
    """What a POST of a prompt's or a template's form comes to: its read (on record:
    hostapp/calls/reads.py, which refuses a quarantined one) when the form is valid. An
    invalid form of a quarantined one is refused whatever it says (the form is the
    unreviewed definition's); any other is a 400 (the form says what is wrong)."""
    if valid:
        return read()
    if offer.status != Offer.ACTIVE:
        return {"read_error": f"{label} is quarantined: a person must review it first"}, 403, None
    return {}, 400, None


def _review(request: HttpRequest, offer: Offer) -> dict[str, Any]:
    """What a prompt's or a template's page shows of its review."""
    return {
        "review": offer_review(offer) if offer.status == Offer.QUARANTINED else None,
        "can_review": request.user.has_perm("catalog.review_tool"),
    }


def prompt_detail(request: HttpRequest, exposed_name: str) -> HttpResponse:
    """A prompt: its definition, its review while quarantined, and a form that fills it in
    (a read on record) and shows the messages the server makes of it."""
    prompt = get_object_or_404(Prompt.objects.select_related("server", "accepted_by"), exposed_name=exposed_name)
    form = PromptArgumentsForm(prompt, request.POST if request.method == "POST" else None)

    def read() -> tuple[dict[str, Any], int, None]:
        try:
            outcome = reads.get_prompt(prompt, form.arguments(), Requester.for_user(request.user))
        except reads.ReadError as exc:
            return {"read_error": exc.message, "read": exc.read}, exc.status, None
        shown: dict[str, Any] = {"read": outcome.read, "was_read": True}
        if outcome.failure is not None:
            shown["read_failure"] = clean_text(outcome.failure.message, 2000)
        else:
            shown["prompt_messages"] = _prompt_messages(outcome.result, prompt.server)
            shown["result_description"] = clean_text((outcome.result or {}).get("description"))
        return shown, 200, None

    context: dict[str, Any] = {}
    status = 200
    if request.method == "POST":
        context, status, _ = _posted(prompt, form.is_valid(), prompt.exposed_name, read)
    context.update(
        {
            "prompt": prompt,
            "display_name": clean_text(prompt.display_name, 200),
            "form": form,
            "arguments": _argument_rows(prompt),
            "original_name": clean_text(prompt.original_name, 512),
            "definition_json": _shown_json(prompt.definition),
            **_review(request, prompt),
        }
    )
    return render(request, "catalog/prompt.html", context, status=status)


@require_POST
@permission_required("catalog.review_tool", raise_exception=True)
def prompt_accept(request: HttpRequest, exposed_name: str) -> HttpResponse:
    prompt = get_object_or_404(Prompt.objects.select_related("server"), exposed_name=exposed_name)
    return _accept(request, prompt, prompt.exposed_name, reverse("prompt", args=[exposed_name]))


def resource_detail(request: HttpRequest, object_id: int) -> HttpResponse:
    """A resource the server lists, and (by POST) a read of it: shown, or one part downloaded."""
    resource = get_object_or_404(Resource.objects.select_related("server"), pk=object_id)
    context: dict[str, Any] = {}
    status = 200
    if request.method == "POST":
        context, status, download = _read(request, resource.server, resource.uri)
        if download is not None:
            return download
    context.update(
        {
            "resource": resource,
            "shown_uri": clean_text(resource.uri, 2000),
            "definition_json": _shown_json(resource.definition),
        }
    )
    return render(request, "catalog/resource.html", context, status=status)


def template_detail(request: HttpRequest, object_id: int) -> HttpResponse:
    """A resource template: its definition, its review while quarantined, and a form of its
    variables whose URI, expanded, is read (on record) and shown."""
    template = get_object_or_404(ResourceTemplate.objects.select_related("server", "accepted_by"), pk=object_id)
    try:
        parsed: UriTemplate | None = UriTemplate.parse(template.uri_template)
        parse_error = ""
    except InvalidUriTemplate as exc:
        parsed, parse_error = None, clean_text(str(exc), 300)
    bound = request.POST if request.method == "POST" else None
    form = TemplateVariablesForm(parsed, bound) if parsed is not None else None

    def read() -> tuple[dict[str, Any], int, HttpResponse | None]:
        assert form is not None  # read only when valid
        return _read(request, template.server, form.uri())

    context: dict[str, Any] = {}
    status = 200
    if request.method == "POST":
        valid = form is not None and form.is_valid()
        context, status, download = _posted(template, valid, "This template", read)
        if download is not None:
            return download
    context.update(
        {
            "template": template,
            "form": form,
            "parse_error": parse_error,
            "shown_uri": clean_text(template.uri_template, 2000),
            "definition_json": _shown_json(template.definition),
            **_review(request, template),
        }
    )
    return render(request, "catalog/template.html", context, status=status)


@require_POST
@permission_required("catalog.review_tool", raise_exception=True)
def template_accept(request: HttpRequest, object_id: int) -> HttpResponse:
    template = get_object_or_404(ResourceTemplate.objects.select_related("server"), pk=object_id)
    return _accept(
        request, template, clean_text(template.uri_template, 2000), reverse("resource_template", args=[object_id])
    )
