"""Approvers told outside the browser that calls wait for them (for an approval, or for a
person's input that a server asked for): a webhook and email, each optional, a burst grouped
into one message (one POST, one email).

How a burst becomes one message, and why no call is lost or told twice:

- `call_waiting` writes an `ApprovalNotice` for the call, in the transaction that made it
  wait when there is one (a wait rolled back leaves no notice), and after the commit
  schedules the send, `GROUP_TASK`, in PATCHBAY_NOTIFY_GROUP seconds, unless one is
  scheduled already: a key in Redis (SET NX, with a time to live) says so. Without Redis,
  each call schedules a send of its own, and the notices still group them.
- A send first clears the key (a call that waits from then on schedules the next send),
  then takes every notice no send has taken, in one conditional UPDATE, so two sends never
  take the same one; it tells of those of their calls that still wait, then deletes them.
- The database is the truth; Redis only saves tasks. A send lost with a worker, or never
  queued (the broker down), leaves its notices, and the sweep (the beat, every minute)
  sends those older than a group should take. A send whose worker died between taking and
  deleting leaves taken notices, taken again after `STALE`: its calls may then be told
  twice, the one repeat there can be, rather than a call nobody hears of.

Notices, not a watermark (the highest call id told): an id is given when the row is
inserted, not when it commits, so a call committed just after a higher one was told would
fall below the mark; and `reopen` makes an older call wait again.

A way that fails for now (no answer, a 5xx or 429, a mail server away) is tried again by
`RETRY_TASK`, that way alone, with backoff; one that cannot succeed (another 4xx, refused
addresses) is logged. Nothing of it reaches a call.

A message names each call's id, tool, server, requester, expiry and suggestion, with a
link, under PATCHBAY_PUBLIC_URL (else `FALLBACK_URL`, where `manage.py run` listens), and
the Pending page; never a call's arguments, which may hold secrets.
"""

from __future__ import annotations

import logging
import smtplib
import uuid
from datetime import UTC, timedelta
from typing import Any

import httpx
import redis
from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Min, Q
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from hostapp.core.redis_client import redis_client

from .models import ApprovalNotice, Call

logger = logging.getLogger(__name__)

GROUP_TASK = "hostapp.calls.notify_approvers"
RETRY_TASK = "hostapp.calls.notify_again"
# Set while a send is scheduled that has not started: later calls join it.
GROUP_KEY = "patchbay:approvers-notice-scheduled"
# The key outlives its send's countdown by this much: a send later than that (a busy or
# restarted worker) lets the next call schedule another, and the two share the notices.
KEY_MARGIN = 60
# A notice taken longer ago than this was taken by a send whose worker died.
STALE = timedelta(minutes=5)
# How many times `RETRY_TASK` retries a way that fails for now (backoff from 5 s, up to 5 min).
RETRIES = 8
# Calls listed one by one in a message; the rest are counted, and on the Pending page.
LISTED = 25
FALLBACK_URL = "http://127.0.0.1:8000"
WEBHOOK, EMAIL = "webhook", "email"


class TryAgain(Exception):
    """A way failed for now (the network, the receiver, the mail server): worth another try."""


def ways() -> list[str]:
    """The ways approvers are told, as configured."""
    return [
        way
        for way, on in ((WEBHOOK, settings.PATCHBAY_APPROVER_WEBHOOK), (EMAIL, settings.PATCHBAY_APPROVER_EMAILS))
        if on
    ]


def call_waiting(call: Call) -> None:
    """`call` began to wait for a person (called inside or outside a transaction, right after
    the call's row is written). Nothing is sent from here: a message is scheduled, after the
    commit, to group whatever else begins to wait meanwhile."""
    if not ways():
        return
    ApprovalNotice.objects.create(call=call)
    transaction.on_commit(_schedule)


def _schedule() -> None:
    """After the commit: one send per burst, `GROUP_TASK` in PATCHBAY_NOTIFY_GROUP seconds."""
    group = settings.PATCHBAY_NOTIFY_GROUP
    try:
        if not redis_client().set(GROUP_KEY, "1", nx=True, ex=group + KEY_MARGIN):
            return  # a send is scheduled: it takes this call's notice too
    except redis.RedisError as exc:  # boundary: without the key, a send per call (the notices group them)
        logger.warning("approvers' notices: Redis does not answer (%s); a send is scheduled per call", exc)
    try:
        current_app.send_task(GROUP_TASK, countdown=group)
    except OperationalError as exc:  # boundary: the notice waits in the database for the next send
        _end_group()
        logger.warning("approvers' notice not scheduled (%s): the next send, or the sweep, tells of it", exc)


def _end_group() -> None:
    try:
        redis_client().delete(GROUP_KEY)
    except redis.RedisError as exc:  # boundary: the key runs out on its own
        logger.info("approvers' notices: the group's key was not cleared (%s); it runs out by itself", exc)


def send_pending(*, overdue: bool = False) -> int:
    """Tell approvers of the calls whose notices no send has taken (`GROUP_TASK`); returns how
    many calls were named. `overdue` (the sweep): only if a notice is older than a group's
    send should have been, so that a burst still gathering is not cut short."""
    now = timezone.now()
    free = Q(batch="") | Q(taken_at__lt=now - STALE)
    if overdue:
        late = now - timedelta(seconds=settings.PATCHBAY_NOTIFY_GROUP + KEY_MARGIN)
        if not ApprovalNotice.objects.filter(Q(batch="", created_at__lt=late) | Q(taken_at__lt=now - STALE)).exists():
            return 0
    else:
        _end_group()  # before taking: a call that waits after this has to schedule the next send
    batch = uuid.uuid4().hex
    # One conditional UPDATE: of two sends at once, each notice goes to one.
    if not ApprovalNotice.objects.filter(free).update(batch=batch, taken_at=now):
        return 0
    taken = ApprovalNotice.objects.filter(batch=batch)
    call_ids = sorted(set(taken.values_list("call_id", flat=True)))
    calls = still_waiting(call_ids)
    try:
        for way in ways() if calls else []:
            try:
                SENDERS[way](calls)
            except TryAgain as exc:
                _try_again_later(way, call_ids, exc)
    finally:
        # Even after an error (it is raised, and logged by the worker): only a send whose
        # worker died leaves its notices, to be taken again.
        taken.delete()
    return len(calls)


def send_again(way: str, call_ids: list[int], *, last: bool = False) -> None:
    """`RETRY_TASK`: tell by `way` of those of `call_ids` that still wait. Raises `TryAgain`
    if that failed for now, but on the `last` attempt, which says it gave up."""
    calls = still_waiting(call_ids)
    if not calls or way not in ways():
        return
    try:
        SENDERS[way](calls)
    except TryAgain as exc:
        if last:
            logger.error("%s; given up (the Pending page still lists them)", exc)
            return
        logger.warning("%s; tried again later", exc)
        raise


def _try_again_later(way: str, call_ids: list[int], exc: TryAgain) -> None:
    logger.warning("%s; tried again later", exc)
    try:
        current_app.send_task(RETRY_TASK, (way, call_ids), countdown=5)
    except OperationalError as queue_exc:  # boundary: the message is lost; the Pending page still lists them
        logger.error("approvers not told by %s of calls %s: the retry was not queued (%s)", way, call_ids, queue_exc)


def still_waiting(call_ids: list[int]) -> list[Call]:
    """Those of the calls that still wait for a person (an approval, or input: with the
    expiry of their first open request as `input_expires`)."""
    # Only the fields a message shows: a call's arguments are never read here, nor what a
    # server asked for (its words go to whoever may answer, on the page).
    fields = ("id", "tool_name", "server_name", "requester_name", "status", "approval_expires_at", "suggestion")
    waiting = Call.objects.filter(pk__in=call_ids, status__in=(Call.WAITING, Call.INPUT)).only(*fields)
    opened = Q(inputs__status="open")
    return list(waiting.annotate(input_expires=Min("inputs__expires_at", filter=opened)).order_by("pk"))


# --- the message ----------------------------------------------------------------------------------


def base_url() -> str:
    return (settings.PATCHBAY_PUBLIC_URL or FALLBACK_URL).rstrip("/")


def call_url(call: Call) -> str:
    return base_url() + reverse("call", args=[call.pk])


def pending_url() -> str:
    return base_url() + reverse("pending")


def subject(calls: list[Call]) -> str:
    count = len(calls)
    kinds = {call.status for call in calls}
    what = "approval" if kinds == {Call.WAITING} else "input" if kinds == {Call.INPUT} else "a person"
    return f"1 call waits for {what} on Patchbay" if count == 1 else f"{count} calls wait for {what} on Patchbay"


def waiting_for(call: Call) -> str:
    return "input" if call.status == Call.INPUT else "approval"


def _plain(value: Any) -> str:
    """Text an agent or a server chose, on one line (a requester's name, a tool's)."""
    return " ".join(str(value).split())


def _expires(call: Call) -> Any:
    if call.status == Call.INPUT:
        return getattr(call, "input_expires", None)
    return call.approval_expires_at


def _expiry(call: Call) -> str:
    expires = _expires(call)
    return f"expires {expires.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if expires else "no expiry"


def _why(call: Call) -> str:
    """What a call waits for, in a message: an input request's server is named (the
    server's own words are not: they are for whoever may answer, on the page)."""
    return f"{_plain(call.server_name)} asks for input" if call.status == Call.INPUT else ""


def suggestion_of(call: Call) -> dict[str, Any] | None:
    made = call.suggestion if isinstance(call.suggestion, dict) else {}
    if not made.get("verdict"):
        return None
    return {"verdict": _plain(made["verdict"]), "probability": made.get("probability")}


def _suggestion_words(call: Call) -> str:
    made = suggestion_of(call)
    if made is None:
        return ""
    p = made["probability"]
    likely = f" (approval {p:.0%} likely)" if isinstance(p, int | float) else ""
    return f"suggestion: {made['verdict']}{likely}"


def call_facts(call: Call) -> dict[str, Any]:
    expires = _expires(call)
    return {
        "id": call.pk,
        "waiting_for": waiting_for(call),
        "tool": call.tool_name,
        "server": call.server_name,
        "requester": call.requester_name,
        "expires_at": expires.isoformat() if expires else None,
        "suggestion": suggestion_of(call),
        "url": call_url(call),
    }


def _slack(value: Any) -> str:
    """Slack's escaping: what an agent chose cannot make a link or a mention (<!channel>)."""
    return _plain(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_body(calls: list[Call]) -> dict[str, Any]:
    """An incoming webhook's JSON: `text` with Slack's links; `calls` and the rest for other
    receivers (Slack and Mattermost ignore keys they do not know)."""
    shown = calls[:LISTED]
    lines = [f"*{_slack(subject(calls))}*: <{pending_url()}|open the pending calls>"]
    for call in shown:
        words = [f"<{call_url(call)}|#{call.pk}> `{_slack(call.tool_name)}` on {_slack(call.server_name)}"]
        why = f"{_slack(_why(call))}, " if _why(call) else ""
        words.append(f"{why}asked by {_slack(call.requester_name)}, {_expiry(call)}")
        if suggested := _suggestion_words(call):
            words.append(_slack(suggested))
        lines.append("• " + " · ".join(words))
    if len(calls) > len(shown):
        lines.append(f"and {len(calls) - len(shown)} more on <{pending_url()}|the Pending page>")
    return {
        "text": "\n".join(lines),
        "event": "calls_waiting",
        "count": len(calls),
        "calls": [call_facts(call) for call in shown],
        "pending_url": pending_url(),
    }


def email_text(calls: list[Call]) -> str:
    shown = calls[:LISTED]
    parts = [subject(calls) + "."]
    for call in shown:
        lines = [
            f"#{call.pk} {_plain(call.tool_name)} on {_plain(call.server_name)}",
            f"  {_why(call) + ', ' if _why(call) else ''}asked by {_plain(call.requester_name)}, {_expiry(call)}",
        ]
        if suggested := _suggestion_words(call):
            lines.append(f"  {suggested}")
        lines.append(f"  {call_url(call)}")
        parts.append("\n".join(lines))
    more = f"{len(calls) - len(shown)} more, and all" if len(calls) > len(shown) else "All"
    parts.append(f"{more} pending calls: {pending_url()}")
    return "\n\n".join(parts) + "\n"


# --- the ways -------------------------------------------------------------------------------------


def post_webhook(calls: list[Call]) -> None:
    """One POST to PATCHBAY_APPROVER_WEBHOOK; raises `TryAgain` if it may succeed later."""
    named = _named(calls)
    try:
        response = httpx.post(settings.PATCHBAY_APPROVER_WEBHOOK, json=webhook_body(calls), timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        if 400 <= status < 500 and status not in (408, 429):
            logger.error("approvers' webhook refused the notice of %s (%s): not sent again", named, status)
            return
        # `from None`: httpx's error names the URL, and a webhook's URL is its secret.
        raise TryAgain(f"approvers' webhook answered {status} to the notice of {named}") from None
    except httpx.InvalidURL:
        logger.error("approvers' webhook: PATCHBAY_APPROVER_WEBHOOK is not a URL; %s not told by it", named)
        return
    except httpx.HTTPError as exc:
        raise TryAgain(f"approvers' webhook not reached with the notice of {named} ({type(exc).__name__})") from None
    logger.info("approvers' webhook told of %s", named)


def send_email(calls: list[Call]) -> None:
    """One email to PATCHBAY_APPROVER_EMAILS; raises `TryAgain` if it may succeed later."""
    named = _named(calls)
    message = EmailMessage(subject(calls), email_text(calls), to=list(settings.PATCHBAY_APPROVER_EMAILS))
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as exc:
        logger.error("approvers' email of %s: every address was refused (%s): not sent again", named, exc.recipients)
        return
    except smtplib.SMTPResponseException as exc:
        if exc.smtp_code >= 500:
            logger.error("approvers' email of %s refused (%s %r): not sent again", named, exc.smtp_code, exc.smtp_error)
            return
        raise TryAgain(f"approvers' email of {named}: the mail server answered {exc.smtp_code}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise TryAgain(f"approvers' email of {named} not sent ({exc})") from exc
    logger.info("approvers' email told of %s", named)


def _named(calls: list[Call]) -> str:
    return "calls " + ", ".join(f"#{call.pk}" for call in calls)


SENDERS = {WEBHOOK: post_webhook, EMAIL: send_email}
