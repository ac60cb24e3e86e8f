from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from hostapp.core.http import safe_next

from . import actions
from .models import Action, Attempt

PAGE_SIZE = 50


def _counts() -> dict[str, int]:
    counts = dict.fromkeys((s for s, _ in Action.STATUSES), 0)
    for row in Action.objects.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def outbox(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    rows = Action.objects.select_related("call").order_by("-id")
    if status:
        rows = rows.filter(status=status)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "actions": page.object_list,
        "page": page,
        "counts": _counts(),
        "status": status,
        "status_choices": Action.STATUSES,
    }
    template = "outbox/_outbox_rows.html" if request.GET.get("fragment") == "1" else "outbox/outbox.html"
    return render(request, template, context)


def dead_letters(request: HttpRequest) -> HttpResponse:
    rows = Action.objects.filter(status__in=[Action.DEAD, Action.UNKNOWN]).select_related("call").order_by("-id")
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    attempts: dict[int, list[Attempt]] = {}
    for attempt in Attempt.objects.filter(action__in=[a.pk for a in page.object_list]).order_by("action_id", "number"):
        attempts.setdefault(attempt.action_id, []).append(attempt)
    items = [{"action": a, "attempts": attempts.get(a.pk, [])} for a in page.object_list]
    context = {"items": items, "page": page, "can_manage": request.user.has_perm("outbox.manage_outbox")}
    template = "outbox/_dead_rows.html" if request.GET.get("fragment") == "1" else "outbox/dead_letters.html"
    return render(request, template, context)


def action_detail(request: HttpRequest, action_id: int) -> HttpResponse:
    action = get_object_or_404(Action.objects.select_related("call"), pk=action_id)
    context = {
        "action": action,
        "attempts": action.attempt_log.all(),
        "can_manage": request.user.has_perm("outbox.manage_outbox"),
    }
    return render(request, "outbox/action.html", context)


def _ids(request: HttpRequest) -> list[int]:
    return [int(x) for x in request.POST.getlist("ids") if x.isdigit()]


@require_POST
@permission_required("outbox.manage_outbox", raise_exception=True)
def redrive(request: HttpRequest) -> HttpResponse:
    done, failed = 0, []
    for action_id in _ids(request):
        try:
            actions.redrive(action_id, request.user.get_username())
            done += 1
        except (actions.OutboxError, Action.DoesNotExist) as exc:
            failed.append(str(exc))
    if done:
        messages.success(request, f"Redriven: {done} action{'s' if done != 1 else ''} (same idempotency keys).")
    for message in failed:
        messages.error(request, message)
    return redirect(safe_next(request, "dead_letters"))


@require_POST
@permission_required("outbox.manage_outbox", raise_exception=True)
def discard(request: HttpRequest) -> HttpResponse:
    reason = request.POST.get("reason", "")
    done, failed = 0, []
    for action_id in _ids(request):
        try:
            actions.discard(action_id, request.user.get_username(), reason)
            done += 1
        except (actions.OutboxError, Action.DoesNotExist) as exc:
            failed.append(str(exc))
    if done:
        messages.success(request, f"Discarded: {done} action{'s' if done != 1 else ''}.")
    for message in failed:
        messages.error(request, message)
    return redirect(safe_next(request, "dead_letters"))


@require_POST
@permission_required("outbox.manage_outbox", raise_exception=True)
def mark_done(request: HttpRequest, action_id: int) -> HttpResponse:
    try:
        actions.mark_done(action_id, request.user.get_username(), request.POST.get("note", ""))
    except (actions.OutboxError, Action.DoesNotExist) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Marked action #{action_id} done.")
    return redirect(safe_next(request, "dead_letters"))
