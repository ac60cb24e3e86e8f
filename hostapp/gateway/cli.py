"""`mcp token create|revoke|list`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser, OutputWrapper

from . import tokens
from .models import AgentToken


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("token", help="agent tokens for the /mcp endpoint")
    sub = p.add_subparsers(dest="token_command", metavar="create|revoke|list", required=True)
    c = sub.add_parser("create", help="create a token (printed once)")
    c.add_argument("name")
    c.add_argument("--servers", default="", help="comma-separated server names the agent may reach (default: all)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=cmd_create)
    r = sub.add_parser("revoke", help="revoke a token")
    r.add_argument("name")
    r.set_defaults(handler=cmd_revoke)
    ls = sub.add_parser("list", help="list tokens (never their values)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_list)


def cmd_create(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    servers = [s.strip() for s in options["servers"].split(",") if s.strip()]
    try:
        agent, token = tokens.create_token(options["name"], servers)
    except (tokens.TokenError, ValidationError) as exc:
        message = "; ".join(getattr(exc, "messages", [])) or str(exc)
        raise CommandError(f"no token created: {message}") from None
    if options["json"]:
        out.write(json.dumps({"name": agent.name, "token": token, "servers": agent.servers}))
        return 0
    out.write(f"Token for {agent.name} (shown once, store it now):")
    out.write(token)
    out.write("Point an MCP client at http://127.0.0.1:8000/mcp with the header  Authorization: Bearer <token>")
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
