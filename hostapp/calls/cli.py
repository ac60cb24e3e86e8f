"""`mcp call|calls|approve|deny`."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from . import actions
from .models import Call
from .suggest import shown

# Exit codes of `mcp call`.
EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_QUEUED = 0, 1, 2, 3, 4
CLI_REQUESTER = actions.Requester(Call.CLI, "cli")


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("call", help="call a tool by its exposed name (server__tool)")
    p.add_argument("tool")
    p.add_argument("--args", dest="arguments", default="{}", help="the arguments as a JSON object (default {})")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for a queued or waiting call to finish",
    )
    p.add_argument("--json", action="store_true", help="print {call_id, status, result, error}")
    p.set_defaults(handler=cmd_call)

    p = subparsers.add_parser("calls", help="list recent calls")
    p.add_argument("--json", action="store_true")
    p.add_argument("--status", choices=[s for s, _ in Call.STATUSES])
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(handler=cmd_calls)

    p = subparsers.add_parser("approve", help="approve a call waiting for approval")
    p.add_argument("id", type=int)
    p.add_argument("--always", action="store_true", help="and always allow this tool from now on (a rule)")
    p.set_defaults(handler=cmd_approve)

    p = subparsers.add_parser("deny", help="deny a call waiting for approval")
    p.add_argument("id", type=int)
    p.add_argument("--reason", required=True, help="what the caller is told")
    p.set_defaults(handler=cmd_deny)


def _exit_code(call: Call) -> int:
    if call.status == Call.SUCCEEDED:
        return EXIT_SUCCEEDED
    if call.status == Call.WAITING:
        return EXIT_WAITING
    if call.status in (Call.QUEUED, Call.RUNNING):
        return EXIT_QUEUED
    return EXIT_FAILED


def _print(call: Call, out: OutputWrapper, as_json: bool) -> None:
    if as_json:
        summary = call.summary()
        out.write(json.dumps({k: summary[k] for k in ("call_id", "status", "result", "error")}, indent=2))
        return
    out.write(f"call #{call.pk}: {call.get_status_display()}")
    if call.status == Call.WAITING:
        out.write(f"  approve with: manage.py mcp approve {call.pk}   (expires {call.approval_expires_at:%H:%M:%S})")
    if call.error:
        out.write(f"  error: {call.error.get('message')}")
    for block in (call.result or {}).get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.write(str(block.get("text", "")))
        elif isinstance(block, dict):
            out.write(f"[{block.get('type')} content]")


def cmd_call(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        arguments = json.loads(options["arguments"])
    except json.JSONDecodeError as exc:
        err.write(f"--args is not valid JSON: {exc.msg} at column {exc.colno}")
        return EXIT_USAGE
    try:
        call = actions.start_call(options["tool"], arguments, CLI_REQUESTER)
    except actions.CallError as exc:
        err.write(exc.message)
        return EXIT_USAGE
    deadline = time.monotonic() + max(0.0, options["wait"])
    while not call.ended and time.monotonic() < deadline:
        time.sleep(0.1)
        call.refresh_from_db()
    _print(call, out, options["json"])
    return _exit_code(call)


def call_row(call: Call) -> dict[str, Any]:
    return {
        "call_id": call.pk,
        "created_at": call.created_at.isoformat(),
        "requester": call.requester_name,
        "requester_kind": call.requester_kind,
        "tool": call.tool_name,
        "server": call.server_name,
        "class": call.tool_class,
        "decision": call.decision,
        "status": call.status,
        "attempts": call.attempts,
        "duration_ms": call.duration_ms,
        "error": (call.error or {}).get("message"),
        "suggestion": shown(call),
    }


def cmd_calls(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    calls = Call.objects.order_by("-id")
    if options["status"]:
        calls = calls.filter(status=options["status"])
    rows = [call_row(c) for c in calls[: max(1, options["limit"])]]
    if options["json"]:
        out.write(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        out.write(f"#{r['call_id']:<6} {r['status']:<10} {r['tool']:<36} {r['requester']:<16} {r['error'] or ''}")
    return 0


def cmd_approve(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        call = actions.approve(options["id"], None, always_allow=options["always"], approver_name="cli")
    except Call.DoesNotExist:
        raise CommandError(f"no call #{options['id']}") from None
    except actions.ApprovalError as exc:
        raise CommandError(str(exc)) from None
    out.write(f"approved call #{call.pk}; it is queued for delivery")
    return 0


def cmd_deny(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        call = actions.deny(options["id"], None, options["reason"], approver_name="cli")
    except Call.DoesNotExist:
        raise CommandError(f"no call #{options['id']}") from None
    except actions.ApprovalError as exc:
        raise CommandError(str(exc)) from None
    out.write(f"denied call #{call.pk}")
    return 0
