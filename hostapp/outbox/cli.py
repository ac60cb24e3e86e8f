"""`mcp outbox|redrive|discard|resolve`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from . import actions
from .models import Action
from .rows import action_row


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("outbox", help="list outbox actions")
    p.add_argument("--json", action="store_true")
    p.add_argument("--status", choices=[s for s, _ in Action.STATUSES])
    p.add_argument("--dead", action="store_true", help="only dead letters and unknown outcomes")
    p.add_argument("--limit", type=int, default=100)
    p.set_defaults(handler=cmd_outbox)

    p = subparsers.add_parser("redrive", help="send a dead or unknown action again (same idempotency key)")
    p.add_argument("id", type=int)
    p.set_defaults(handler=cmd_redrive)

    p = subparsers.add_parser("discard", help="give up on an action")
    p.add_argument("id", type=int)
    p.add_argument("--reason", required=True)
    p.set_defaults(handler=cmd_discard)

    p = subparsers.add_parser("resolve", help="mark an action whose outcome was unknown as done")
    p.add_argument("id", type=int)
    p.add_argument("--note", default="")
    p.set_defaults(handler=cmd_resolve)


def cmd_outbox(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    rows = Action.objects.select_related("call").order_by("-id")
    if options["dead"]:
        rows = rows.filter(status__in=[Action.DEAD, Action.UNKNOWN])
    if options["status"]:
        rows = rows.filter(status=options["status"])
    data = [action_row(a) for a in rows[: max(1, options["limit"])]]
    if options["json"]:
        out.write(json.dumps(data, indent=2))
        return 0
    for r in data:
        out.write(
            f"#{r['id']:<6} {r['status']:<10} {r['tool']:<36} attempts {r['attempts']:<3} {r['last_error'] or ''}"
        )
    return 0


def _do(fn: Any, *args: Any) -> Action:
    try:
        return fn(*args)
    except Action.DoesNotExist:
        raise CommandError(f"no action #{args[0]}") from None
    except actions.OutboxError as exc:
        raise CommandError(str(exc)) from None


def cmd_redrive(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    action = _do(actions.redrive, options["id"], "cli")
    out.write(f"action #{action.pk} is queued again with key {action.idempotency_key}")
    return 0


def cmd_discard(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    action = _do(actions.discard, options["id"], "cli", options["reason"])
    out.write(f"action #{action.pk} discarded")
    return 0


def cmd_resolve(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    action = _do(actions.mark_done, options["id"], "cli", options["note"])
    out.write(f"action #{action.pk} marked done")
    return 0
