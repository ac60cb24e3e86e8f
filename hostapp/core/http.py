"""Helpers every app's views use: access decorators and safe redirects."""

from __future__ import annotations

from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest
from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme

# For views only administrators may use (anyone else is sent to log in).
staff_required = user_passes_test(lambda u: u.is_staff)


def safe_next(request: HttpRequest, default: str) -> str:
    """The `next` a form posted, if it stays on this site; else `default` (a URL name or path)."""
    candidate = request.POST.get("next") or request.GET.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return resolve_url(default)
