from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode, urlsplit

import jsonschema
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from hostapp.catalog.models import Tool
from hostapp.core.http import safe_next
from hostapp.mcp.sanitize import clean_text

from . import actions, inputs, suggest
from .input_forms import InputForm, answer_items
from .models import Call, InputRequest, Read

CALLS_PAGE_SIZE = 50
READS_PAGE_SIZE = 50
EXPOSED_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a prompt's, linked to its page
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
AUDIO_TYPES = {"audio/wav", "audio/x-wav", "audio/mpeg", "audio/ogg", "audio/webm", "audio/mp4"}


def _filtered(request: HttpRequest) -> tuple[Any, dict[str, str]]:
    filters = {k: request.GET.get(k, "").strip() for k in ("status", "server", "tool", "requester")}
    calls = Call.objects.all()
    if filters["status"]:
        calls = calls.filter(status=filters["status"])
    if filters["server"]:
        calls = calls.filter(server_name=filters["server"])
    if filters["tool"]:
        calls = calls.filter(tool_name=filters["tool"])
    if filters["requester"]:
        calls = calls.filter(requester_name=filters["requester"])
    return calls, filters


def call_list(request: HttpRequest) -> HttpResponse:
    calls, filters = _filtered(request)
    page = Paginator(
        calls.only(
            "id",
            "created_at",
            "requester_kind",
            "requester_name",
            "tool_name",
            "server_name",
            "tool_class",
            "decision",
            "status",
            "attempts",
            "duration_ms",
            "is_error",
        ),
        CALLS_PAGE_SIZE,
    ).get_page(request.GET.get("page"))
    context = {
        "calls": page.object_list,
        "page": page,
        "filters": filters,
        "status_choices": Call.STATUSES,
        "query": urlencode({k: v for k, v in filters.items() if v}),
    }
    template = "calls/_call_rows.html" if request.GET.get("fragment") == "1" else "calls/calls.html"
    return render(request, template, context)


def read_list(request: HttpRequest) -> HttpResponse:
    """Every read of a resource and every prompt filled in, newest first: who, what, when,
    how it ended, how much came back and how long it took (hostapp/calls/reads.py)."""
    filters = {k: request.GET.get(k, "").strip() for k in ("server", "kind", "outcome", "requester")}
    rows = Read.objects.all()
    if filters["server"]:
        rows = rows.filter(server_name=filters["server"])
    if filters["kind"]:
        rows = rows.filter(kind=filters["kind"])
    if filters["outcome"]:
        rows = rows.filter(outcome=filters["outcome"])
    if filters["requester"]:
        rows = rows.filter(requester_name=filters["requester"])
    page = Paginator(
        rows.only(
            "id",
            "created_at",
            "requester_kind",
            "requester_name",
            "server_name",
            "kind",
            "target",
            "arguments",
            "outcome",
            "error",
            "duration_ms",
            "size",
            "parts",
        ),
        READS_PAGE_SIZE,
    ).get_page(request.GET.get("page"))
    shown = list(page.object_list)
    for read in shown:
        # A URI and an error message are the server's words, or a requester's.
        read.shown_target = clean_text(read.target, 300)  # type: ignore[attr-defined]
        error = read.error.get("message") if isinstance(read.error, dict) else ""
        read.shown_error = clean_text(error, 300)  # type: ignore[attr-defined]
        read.shown_arguments = clean_text(  # type: ignore[attr-defined]
            json.dumps(read.arguments, ensure_ascii=False) if read.arguments else "", 200
        )
        exposed = read.kind == Read.PROMPT and EXPOSED_NAME.fullmatch(read.target)
        read.link = reverse("prompt", args=[read.target]) if exposed else ""  # type: ignore[attr-defined]
    context = {
        "reads": shown,
        "page": page,
        "filters": filters,
        "kind_choices": Read.KINDS,
        "outcome_choices": Read.OUTCOMES,
        "query": urlencode({k: v for k, v in filters.items() if v}),
    }
    return render(request, "calls/reads.html", context)


def _result_view(call: Call) -> dict[str, Any]:
    """The result as the page shows it: blocks by type, capped, structured content checked."""
    result = call.result or {}
    raw = json.dumps(result, ensure_ascii=False)
    cap = settings.PATCHBAY_RESULT_DISPLAY_CAP
    blocks: list[dict[str, Any]] = []
    budget = cap
    for block in result.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            shown, cut = text[: max(0, budget)], len(text) > budget
            budget -= len(shown)
            blocks.append({"type": "text", "text": shown, "truncated": cut, "size": len(text)})
        elif kind in ("image", "audio"):
            mime = str(block.get("mimeType", ""))
            data = str(block.get("data", ""))
            allowed = IMAGE_TYPES if kind == "image" else AUDIO_TYPES
            fits = len(data) <= budget
            budget -= len(data) if fits else 0
            blocks.append(
                {
                    "type": kind,
                    "mime": mime,
                    "data": data if (mime in allowed and fits) else "",
                    "size": len(data) * 3 // 4,
                    "refused": mime not in allowed,
                }
            )
        elif kind == "resource_link":
            uri = str(block.get("uri", ""))
            blocks.append(
                {
                    "type": "resource_link",
                    "uri": uri,
                    "name": block.get("name") or block.get("title") or uri,
                    "description": block.get("description", ""),
                    "mime": block.get("mimeType", ""),
                    "linkable": uri.startswith("https://"),
                }
            )
        elif kind == "resource":
            res = block.get("resource") or {}
            resource_text = res.get("text")
            blocks.append(
                {
                    "type": "resource",
                    "uri": res.get("uri", ""),
                    "mime": res.get("mimeType", ""),
                    "text": str(resource_text)[: max(0, budget)] if resource_text is not None else None,
                    "truncated": resource_text is not None and len(str(resource_text)) > budget,
                    "blob_size": len(res.get("blob") or "") * 3 // 4,
                }
            )
            if resource_text is not None:
                budget -= len(str(resource_text))
        else:
            blocks.append({"type": "other", "json": json.dumps(block, indent=2, ensure_ascii=False)[:2000]})
    structured = result.get("structuredContent")
    structured_view = None
    if structured is not None:
        text = json.dumps(structured, indent=2, ensure_ascii=False)
        check: list[str] | str | None = None  # the schema's complaints, or "ok"
        tool = call.tool
        schema = tool.output_schema if tool is not None else None
        if schema:
            try:
                validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
                validator_cls.check_schema(schema)
                errors = sorted(validator_cls(schema).iter_errors(structured), key=lambda e: list(e.path))
            except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType) as exc:
                check = [f"the tool's output schema is invalid, so the result cannot be checked: {exc}"[:300]]
            else:
                check = [
                    f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors[:10]
                ] or "ok"
        structured_view = {"json": text[:cap], "truncated": len(text) > cap, "check": check}
    return {"blocks": blocks, "structured": structured_view, "size": len(raw), "truncated": len(raw) > cap}


def call_detail(request: HttpRequest, call_id: int) -> HttpResponse:
    call = get_object_or_404(Call.objects.select_related("tool", "decided_by"), pk=call_id)
    context = {
        "call": call,
        "arguments_json": json.dumps(call.arguments, indent=2, ensure_ascii=False),
        "result_view": _result_view(call) if call.result else None,
        "error_json": json.dumps(call.error, indent=2, ensure_ascii=False) if call.error else "",
        "events": call.events.all(),
        "action": getattr(call, "action", None),
        "can_approve": request.user.has_perm("calls.approve_call"),
        **_inputs_of(request, call),
    }
    template = "calls/_call_detail.html" if request.GET.get("fragment") == "1" else "calls/call.html"
    return render(request, template, context)


def _inputs_of(request: HttpRequest, call: Call) -> dict[str, Any]:
    """A call's requests for input, as its page lists them; the answers only for those who
    may see them (`inputs.can_answer`)."""
    may_answer = inputs.can_answer(request.user, call)
    rows = [
        {"row": row, "answer": answer_items(row.schema, row.content) if may_answer else []} for row in call.inputs.all()
    ]
    return {"input_requests": rows, "can_answer": may_answer}


def call_result_download(request: HttpRequest, call_id: int) -> HttpResponse:
    call = get_object_or_404(Call, pk=call_id)
    response = HttpResponse(json.dumps(call.result, indent=2, ensure_ascii=False), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="call-{call.pk}-result.json"'
    return response


def pending(request: HttpRequest) -> HttpResponse:
    calls = Call.objects.filter(status=Call.WAITING).order_by("id").select_related("tool", "tool__server")
    rows = [{"call": c, "arguments_json": json.dumps(c.arguments, indent=2, ensure_ascii=False)} for c in calls]
    context = {"rows": rows, "can_approve": request.user.has_perm("calls.approve_call")}
    template = "calls/_pending_rows.html" if request.GET.get("fragment") == "1" else "calls/pending.html"
    return render(request, template, context)


def input_queue(request: HttpRequest) -> HttpResponse:
    """The open requests for input this user may answer, oldest first."""
    context = {"rows": inputs.open_requests(request.user)}
    template = "calls/_input_rows.html" if request.GET.get("fragment") == "1" else "calls/inputs.html"
    return render(request, template, context)


def _url_view(url: str) -> dict[str, Any]:
    """A URL a server asks a person to open, as the page shows it: whole, and its host (in
    ASCII too, when it is an internationalised name that could pass for another)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_host = host
    return {
        "url": url,
        "host": host,
        "ascii_host": ascii_host if ascii_host != host else "",
        "has_userinfo": "@" in parts.netloc,
        # inputs.open_request let in only these; checked again where a link is made of it.
        "linkable": parts.scheme in ("http", "https") and bool(host),
    }


ANSWERED_WORDS = {
    InputRequest.ACCEPTED: "Answered",
    InputRequest.DECLINED: "Declined",
    InputRequest.CANCELLED: "Cancelled",
}


@require_http_methods(["GET", "POST"])
def input_detail(request: HttpRequest, input_id: int) -> HttpResponse:
    """A request for input: what the server asks and, for those who may answer it, the
    form (or the URL to open) with its answers; once answered, how it ended."""
    row = get_object_or_404(InputRequest.objects.select_related("call"), pk=input_id)
    may_answer = inputs.can_answer(request.user, row.call)
    form: InputForm | None = None
    status = 200
    if request.method == "POST":
        if not may_answer:
            raise PermissionDenied("only the call's requester and approvers may answer its requests for input")
        action = request.POST.get("action", "")
        if action not in InputRequest.ANSWERS:
            return HttpResponse("The answer is accept, decline or cancel.", status=400)
        content = None
        if action == InputRequest.ACCEPTED and row.mode == InputRequest.FORM and row.is_open:
            form = InputForm(row.schema, request.POST)
            content = form.content() if form.is_valid() else None
        if form is None or not form.errors:
            try:
                inputs.answer(row.pk, action, content, person=request.user)
            except inputs.InputError as exc:
                if exc.status == 409 or form is None:
                    messages.error(request, exc.message)
                    return redirect("input", input_id=row.pk)
                form.add_problems(exc.errors or [{"path": "", "message": exc.message}])
            else:
                word = ANSWERED_WORDS[action]
                messages.success(request, f"{word} {row.server_name}'s request for input of call #{row.call_id}.")
                return redirect(safe_next(request, reverse("call", args=[row.call_id])))
        status = 400
    if form is None and row.is_open and may_answer and row.mode == InputRequest.FORM:
        form = InputForm(row.schema)
    context = {
        "row": row,
        "call": row.call,
        "can_answer": may_answer,
        "form": form,
        "url_view": _url_view(row.url) if row.mode == InputRequest.URL else None,
        "answer": answer_items(row.schema, row.content) if may_answer else [],
        "next_url": safe_next(request, reverse("call", args=[row.call_id])),
    }
    template = "calls/_input_state.html" if request.GET.get("fragment") == "1" else "calls/input.html"
    return render(request, template, context, status=status)


@require_POST
@permission_required("calls.approve_call", raise_exception=True)
def approve(request: HttpRequest, call_id: int) -> HttpResponse:
    try:
        call = actions.approve(call_id, request.user, always_allow=request.POST.get("always") == "1")
    except actions.ApprovalError as exc:
        messages.error(request, str(exc))
    except Call.DoesNotExist:
        return HttpResponse("No such call.", status=404)
    else:
        extra = " and always allowed this tool" if request.POST.get("always") == "1" else ""
        messages.success(request, f"Approved call #{call.pk}{extra}.")
    return redirect(safe_next(request, "pending"))


@require_POST
@permission_required("calls.approve_call", raise_exception=True)
def deny(request: HttpRequest, call_id: int) -> HttpResponse:
    try:
        call = actions.deny(call_id, request.user, request.POST.get("reason", ""))
    except actions.ApprovalError as exc:
        messages.error(request, str(exc))
    except Call.DoesNotExist:
        return HttpResponse("No such call.", status=404)
    else:
        messages.success(request, f"Denied call #{call.pk}.")
    return redirect(safe_next(request, "pending"))


@require_POST
@permission_required("calls.approve_call", raise_exception=True)
def reopen(request: HttpRequest, call_id: int) -> HttpResponse:
    """A denial the host made on its suggestion goes back to the approvers."""
    try:
        call = actions.reopen(call_id, request.user)
    except actions.ApprovalError as exc:
        messages.error(request, str(exc))
    except Call.DoesNotExist:
        return HttpResponse("No such call.", status=404)
    else:
        messages.success(request, f"Call #{call.pk} waits for a person's approval again.")
    return redirect("call", call_id=call_id)


@require_POST
def call_tool(request: HttpRequest, exposed_name: str) -> HttpResponse:
    """Start a call from the tool page; answers JSON to the page's script, or redirects a plain form."""
    get_object_or_404(Tool, exposed_name=exposed_name)
    raw = request.POST.get("arguments", "")
    wants_json = request.headers.get("Accept", "").startswith("application/json")
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        error: dict[str, Any] = {
            "error": f"the arguments are not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            "errors": [{"path": "", "message": exc.msg}],
        }
        if wants_json:
            return JsonResponse(error, status=400)
        messages.error(request, error["error"])
        return redirect("tool", exposed_name=exposed_name)
    # The form's own key: a second submit of the same form (a double click, a reload, the
    # back button) is answered with the first call.
    key = request.POST.get("submit_key", "").strip()
    repeated = False
    try:
        call = actions.start_call(exposed_name, arguments, actions.Requester.for_user(request.user), submit_key=key)
    except actions.Submitted as repeat:
        call, repeated = repeat.call, True
    except actions.CallError as exc:
        if wants_json:
            return JsonResponse({"error": exc.message, "errors": exc.errors}, status=exc.status)
        messages.error(request, exc.message)
        return redirect("tool", exposed_name=exposed_name)
    url = reverse("call", args=[call.pk])
    if wants_json:
        return JsonResponse({**call.summary(), "url": url, "repeated": repeated})
    if repeated:
        messages.info(request, f"This form was sent before: this is its call, #{call.pk}.")
    return redirect(url)


def suggestions(request: HttpRequest) -> HttpResponse:
    """How suggestions are made, the thresholds the costs set, and how well they did."""
    context = {
        "costs": suggest.cost_table(),
        "calibration": suggest.measured(),
        "min_evidence": suggest.MIN_EVIDENCE,
        "history": suggest.HISTORY,
        "sharpness": suggest.SHARPNESS,
        "tool_min": suggest.TOOL_MIN,
        "limit_ms": round(settings.PATCHBAY_SUGGEST_LIMIT * 1000),
    }
    return render(request, "calls/suggestions.html", context)
