"""`mcp call|calls|approve|deny|inputs|answer`."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.utils import timezone

from hostapp.mcp.sanitize import clean_text

from . import actions, inputs
from .models import Call, InputRequest
from .suggest import shown

# Exit codes of `mcp call`.
EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_QUEUED = 0, 1, 2, 3, 4
# Exit codes of `mcp answer` (and its usage errors: EXIT_USAGE).
EXIT_ANSWERED, EXIT_NOT_ANSWERED = 0, 1
CLI_REQUESTER = actions.Requester(Call.CLI, "cli")
# Who the command line is when it decides or answers (as `mcp approve` is).
CLI_PERSON = "cli"
# How often `mcp call` reads the row of a call of its own that waits for input.
INPUT_POLL = 0.5

CALL_EXITS = """\
exit codes:
  0  the call succeeded
  1  it failed (the tool's error, a refusal by the policy, a denial)
  2  usage: no such tool, arguments that are not valid JSON or do not fit the tool
  3  it waits for a person: for approval (destructive tools), or for input its server
     asked for in a call run by a worker; --json says which ("waiting_for")
  4  queued (write tools go through the outbox) and not finished within --wait

A call run at once (read-only tools) runs in this process: when its server asks for
input, `mcp call` says so on stderr and waits for the call to end (answer with
`mcp answer ID ...` from another shell, or in the browser), then exits as above.
"""

ANSWER_EXITS = """\
exit codes:
  0  answered
  1  not answered: no such request, no longer open, or the values do not fit the form
  2  usage: --content is not a JSON object
"""


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "call",
        help="call a tool by its exposed name (server__tool)",
        epilog=CALL_EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("tool")
    p.add_argument("--args", dest="arguments", default="{}", help="the arguments as a JSON object (default {})")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for a queued or waiting call to finish",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print {call_id, status, result, error} (and waiting_for, input_requests while it waits)",
    )
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

    p = subparsers.add_parser("inputs", help="list the requests for input servers wait for")
    p.add_argument("--json", action="store_true", help="print a JSON list of the open requests")
    p.set_defaults(handler=cmd_inputs)

    p = subparsers.add_parser(
        "answer",
        help="answer a server's request for input (see `mcp inputs`)",
        epilog=ANSWER_EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("id", type=int, help="the request's id (`mcp inputs`)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--content", metavar="JSON", help="accept, with these values (a JSON object)")
    how.add_argument(
        "--accept", action="store_true", help="accept without values (a URL you opened, or a form's defaults)"
    )
    how.add_argument("--decline", action="store_true", help="refuse to give what is asked")
    how.add_argument("--cancel", action="store_true", help="dismiss the request without a choice")
    p.set_defaults(handler=cmd_answer)


def exit_code(call: Call) -> int:
    """What `mcp call` exits with for `call` as it stands."""
    if call.status == Call.SUCCEEDED:
        return EXIT_SUCCEEDED
    if call.status in (Call.WAITING, Call.INPUT):
        return EXIT_WAITING
    if call.status in (Call.QUEUED, Call.RUNNING):
        return EXIT_QUEUED
    return EXIT_FAILED


def _open_inputs(call: Call) -> list[InputRequest]:
    if call.status != Call.INPUT:  # a call has open requests only while it waits for input
        return []
    return list(InputRequest.objects.filter(call=call, status=InputRequest.OPEN).order_by("id"))


def _one_line(text: Any, cap: int = 1000) -> str:
    """Text from a server as one line a terminal may show: no controls, no line breaks."""
    return " ".join(clean_text(text, cap).split())


def _how_to_answer(row: InputRequest) -> str:
    accept = "--accept" if row.mode == InputRequest.URL else "--content JSON"
    page = f"{settings.PATCHBAY_PUBLIC_URL.rstrip('/')}/calls/inputs/{row.pk}/"
    return f"manage.py mcp answer {row.pk} {accept} | --decline | --cancel, or in the browser at {page}"


def call_summary(call: Call, waiting: list[InputRequest] | None = None) -> dict[str, Any]:
    """`mcp call --json`: the call's id, status, result and error; while it waits for a
    person, what for (`waiting_for`: "approval" or "input", and the open requests' ids)."""
    summary = call.summary()
    body = {k: summary[k] for k in ("call_id", "status", "result", "error")}
    if call.status == Call.WAITING:
        body["waiting_for"] = "approval"
    elif call.status == Call.INPUT:
        rows = _open_inputs(call) if waiting is None else waiting
        body.update(waiting_for="input", input_requests=[row.pk for row in rows])
    return body


def _print(call: Call, out: OutputWrapper, as_json: bool) -> None:
    waiting = _open_inputs(call)
    if as_json:
        out.write(json.dumps(call_summary(call, waiting), indent=2))
        return
    out.write(f"call #{call.pk}: {call.get_status_display()}")
    if call.status == Call.WAITING:
        out.write(f"  approve with: manage.py mcp approve {call.pk}   (expires {call.approval_expires_at:%H:%M:%S})")
    for row in waiting:
        out.write(f"  input #{row.pk}: {row.server_name}: {row.message}")
        out.write(f"  answer with: {_how_to_answer(row)}")
    if call.error:
        out.write(f"  error: {call.error.get('message')}")
    for block in (call.result or {}).get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.write(str(block.get("text", "")))
        elif isinstance(block, dict):
            out.write(f"[{block.get('type')} content]")


def _await_own_call(call: Call, err: OutputWrapper) -> Call:
    """A call run at once goes on in this process's pool while its server waits for input:
    the process stays until the call has ended (were it to exit, the call would be lost).
    Each request is announced on stderr as it opens."""
    told: set[int] = set()
    while not call.ended:
        for row in _open_inputs(call):
            if row.pk not in told:
                told.add(row.pk)
                err.write(f"call #{call.pk} waits for input #{row.pk}: {row.server_name}: {row.message}")
                if row.mode == InputRequest.URL:
                    err.write(f"  open: {_one_line(row.url, inputs.URL_CAP)}")
                err.write(f"  answer with: {_how_to_answer(row)}")
                err.write("  (the call runs in this process: waiting for it to end)")
        time.sleep(INPUT_POLL)
        call.refresh_from_db()
    return call


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
    if call.decision == Call.RUN and not call.ended:
        # Run at once, in this process: its server asked for input (it may be answered already).
        call = _await_own_call(call, err)
    deadline = time.monotonic() + max(0.0, options["wait"])
    while not call.ended and time.monotonic() < deadline:
        time.sleep(0.1)
        call.refresh_from_db()
    _print(call, out, options["json"])
    return exit_code(call)


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
        call = actions.approve(options["id"], None, always_allow=options["always"], approver_name=CLI_PERSON)
    except Call.DoesNotExist:
        raise CommandError(f"no call #{options['id']}") from None
    except actions.ApprovalError as exc:
        raise CommandError(str(exc)) from None
    out.write(f"approved call #{call.pk}; it is queued for delivery")
    return 0


def cmd_deny(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        call = actions.deny(options["id"], None, options["reason"], approver_name=CLI_PERSON)
    except Call.DoesNotExist:
        raise CommandError(f"no call #{options['id']}") from None
    except actions.ApprovalError as exc:
        raise CommandError(str(exc)) from None
    out.write(f"denied call #{call.pk}")
    return 0


# --- requests for input ------------------------------------------------------------------------------


def _field_line(name: str, spec: dict[str, Any], required: bool) -> str:
    """One field of a requested schema as a line: its name, kind, choices, bounds, default."""
    items = spec.get("items") or {}
    choices = (
        spec.get("enum") or items.get("enum") or [o["const"] for o in spec.get("oneOf") or items.get("anyOf") or []]
    )
    kind = "list" if spec.get("type") == "array" else str(spec.get("type", "?"))
    line = f"{name}: {spec['format'] + ' ' if spec.get('format') else ''}{kind}"
    if choices:
        line += " of " + " | ".join(map(str, choices))
    if "minimum" in spec or "maximum" in spec:
        line += f" in {spec.get('minimum', '')}..{spec.get('maximum', '')}"
    if required:
        line += ", required"
    if "default" in spec:
        line += f", default {json.dumps(spec['default'])}"
    title = spec.get("title") or spec.get("description") or ""
    if title and title != name:
        line += f" ({title})"
    # Names and choices come from the server as it sent them (only texts are sanitized).
    return _one_line(line)


def _print_request(row: InputRequest, out: OutputWrapper) -> None:
    expires = timezone.localtime(row.expires_at)
    out.write(f"input #{row.pk}  call #{row.call_id} {row.call.tool_name}  ({row.mode}, expires {expires:%H:%M:%S})")
    out.write(f"  {row.server_name}: {row.message}")
    if row.mode == InputRequest.URL:
        out.write(f"  open: {_one_line(row.url, inputs.URL_CAP)}")
    else:
        schema = row.schema or {}
        required = set(schema.get("required") or [])
        for name, spec in (schema.get("properties") or {}).items():
            out.write(f"  - {_field_line(name, spec, name in required)}")
        if row.sensitive:
            out.write("  warning: this form seems to ask for a secret; a form must not be used for one")
    out.write(f"  answer with: {_how_to_answer(row)}")


def cmd_inputs(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    rows = inputs.open_requests()
    if options["json"]:
        out.write(json.dumps([row.summary() for row in rows], indent=2))
        return 0
    for i, row in enumerate(rows):
        if i:
            out.write("")
        _print_request(row, out)
    return 0


def _problems(errors: list[dict[str, str]]) -> str:
    return "; ".join(f"{_one_line(e['path'], 200) or 'the answer'}: {e['message']}" for e in errors)


def cmd_answer(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    content: Any = None
    if options["content"] is not None:
        try:
            content = json.loads(options["content"])
        except json.JSONDecodeError as exc:
            err.write(f"--content is not valid JSON: {exc.msg} at column {exc.colno}")
            return EXIT_USAGE
        if not isinstance(content, dict):
            err.write("--content must be a JSON object of the form's values")
            return EXIT_USAGE
        action = InputRequest.ACCEPTED
    elif options["decline"]:
        action = InputRequest.DECLINED
    elif options["cancel"]:
        action = InputRequest.CANCELLED
    else:
        action = InputRequest.ACCEPTED
    try:
        row = inputs.answer(options["id"], action, content, name=CLI_PERSON)
    except InputRequest.DoesNotExist:
        err.write(f"no input request #{options['id']}")
        return EXIT_NOT_ANSWERED
    except inputs.InputError as exc:
        err.write(f"the answer does not fit the form: {_problems(exc.errors)}" if exc.errors else exc.message)
        return EXIT_NOT_ANSWERED
    out.write(f"input #{row.pk} of call #{row.call_id}: {row.get_status_display()}")
    return EXIT_ANSWERED
