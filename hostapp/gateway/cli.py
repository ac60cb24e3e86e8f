"""`mcp token create|update|show|revoke|list`: agent tokens and their views."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser, OutputWrapper

from . import tokens
from .agent_catalog import load_catalog
from .models import AgentToken
from .server import STATUS_TOOL


def _view_options(p: CommandParser, keep: bool) -> None:
    default = None if keep else ""
    what = " (omitted: kept as it is; an empty value clears it)" if keep else ""
    p.add_argument("--servers", default=default, help="comma-separated server names it may reach (empty: all)" + what)
    p.add_argument(
        "--tools", default=default, help="comma-separated tool names or glob patterns it sees (empty: all)" + what
    )
    p.add_argument("--exclude", default=default, help="comma-separated names or patterns it does not see" + what)
    p.add_argument(
        "--max-class",
        default=default,
        help="the highest class it sees: read_only, write or destructive (empty or all: every class)" + what,
    )
    p.add_argument(
        "--prefix",
        action=argparse.BooleanOptionalAction,
        default=None if keep else True,
        help="--no-prefix: a view of exactly one server lists the server's own tool names" + what,
    )


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("token", help="agent tokens for the /mcp endpoint")
    sub = p.add_subparsers(dest="token_command", metavar="create|update|show|revoke|list", required=True)
    c = sub.add_parser("create", help="create a token (printed once) and its view")
    c.add_argument("name")
    _view_options(c, keep=False)
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=cmd_create)
    u = sub.add_parser("update", help="change what a token's agent sees")
    u.add_argument("name")
    _view_options(u, keep=True)
    u.add_argument("--json", action="store_true")
    u.set_defaults(handler=cmd_update)
    s = sub.add_parser("show", help="a token's view and the exact tools its agent is listed")
    s.add_argument("name")
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=cmd_show)
    r = sub.add_parser("revoke", help="revoke a token")
    r.add_argument("name")
    r.set_defaults(handler=cmd_revoke)
    ls = sub.add_parser("list", help="list tokens (never their values)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_list)


def _view_row(agent: AgentToken) -> dict[str, Any]:
    return {
        "servers": agent.servers,
        "tools": agent.tools,
        "exclude": agent.exclude,
        "max_class": agent.max_class or None,
        "no_prefix": agent.no_prefix,
    }


def cmd_create(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        view = tokens.make_view(
            _split(options["servers"]),
            _split(options["tools"]),
            _split(options["exclude"]),
            options["max_class"],
            no_prefix=not options["prefix"],
        )
        agent, token = tokens.create_token(options["name"], view=view)
    except (tokens.TokenError, ValidationError) as exc:
        message = "; ".join(getattr(exc, "messages", [])) or str(exc)
        raise CommandError(f"no token created: {message}") from None
    if options["json"]:
        out.write(json.dumps({"name": agent.name, "token": token, **_view_row(agent)}))
        return 0
    out.write(f"Token for {agent.name} (shown once, store it now):")
    out.write(token)
    out.write(f"It sees {agent.view.describe()}; `mcp token show {agent.name}` lists its tools.")
    out.write("Point an MCP client at http://127.0.0.1:8000/mcp with the header  Authorization: Bearer <token>")
    return 0


def cmd_update(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    agent = AgentToken.objects.filter(name=options["name"], revoked_at__isnull=True).first()
    if agent is None:
        raise CommandError(f"no active token named {options['name']!r}")
    given = {key: _split(options[key]) for key in ("servers", "tools", "exclude")}
    try:
        view = tokens.make_view(
            given["servers"] if given["servers"] is not None else agent.servers,
            given["tools"] if given["tools"] is not None else agent.tools,
            given["exclude"] if given["exclude"] is not None else agent.exclude,
            options["max_class"] if options["max_class"] is not None else agent.max_class,
            no_prefix=agent.no_prefix if options["prefix"] is None else not options["prefix"],
        )
        agent = tokens.update_view(agent.name, view)
    except tokens.TokenError as exc:
        raise CommandError(f"not changed: {exc}") from None
    if options["json"]:
        out.write(json.dumps({"name": agent.name, **_view_row(agent)}))
    else:
        out.write(f"{agent.name} now sees {agent.view.describe()}")
    return 0


def cmd_show(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    agent = AgentToken.objects.filter(name=options["name"]).first()
    if agent is None:
        raise CommandError(f"no token named {options['name']!r}")
    tools = load_catalog().listed(agent.info)
    rows = [{"name": t.name, "title": t.title, "description": t.description} for t in tools]
    if options["json"]:
        out.write(
            json.dumps(
                {"name": agent.name, "revoked": agent.revoked_at is not None, **_view_row(agent), "listed": rows},
                indent=2,
            )
        )
        return 0
    out.write(f"{agent.name}{' (revoked)' if agent.revoked_at else ''}: sees {agent.view.describe()}")
    out.write(f"{len(rows)} tool{'s' if len(rows) != 1 else ''} listed (and {STATUS_TOOL}):")
    for row in rows:
        out.write(f"  {row['name']}")
    return 0


def cmd_revoke(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        agent = tokens.revoke_token(options["name"])
    except tokens.TokenError as exc:
        raise CommandError(str(exc)) from None
    out.write(f"revoked the token of {agent.name}")
    return 0


def cmd_list(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    rows = [
        {
            "name": a.name,
            "hint": a.hint + "…",
            "servers": a.servers or "all",
            "view": a.view.describe(),
            "created_at": a.created_at.isoformat(),
            "last_used_at": a.last_used_at.isoformat() if a.last_used_at else None,
            "revoked": a.revoked_at is not None,
        }
        for a in AgentToken.objects.order_by("name")
    ]
    if options["json"]:
        out.write(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        out.write(
            f"{r['name']:<24} {r['hint']:<12} servers: {r['servers']!s:<20} {'revoked' if r['revoked'] else 'active'}"
        )
    return 0
