"""`mcp secrets new-key|rotate` and `mcp auth list|disconnect`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.db import transaction

from hostapp.catalog.models import Server, live_states
from hostapp.core import crypto

from . import flows
from .models import Credential


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("secrets", help="the encryption of secrets at rest")
    sub = p.add_subparsers(dest="secrets_command", metavar="new-key|rotate", required=True)
    n = sub.add_parser("new-key", help="print a new key for PATCHBAY_ENCRYPTION_KEY")
    n.set_defaults(handler=cmd_new_key)
    r = sub.add_parser(
        "rotate",
        help="re-encrypt every stored secret under the first key of PATCHBAY_ENCRYPTION_KEY "
        "(set it to NEW,OLD first; drop OLD afterwards)",
    )
    r.set_defaults(handler=cmd_rotate)

    a = subparsers.add_parser("auth", help="OAuth credentials of HTTP servers")
    asub = a.add_subparsers(dest="auth_command", metavar="list|disconnect", required=True)
    ls = asub.add_parser("list", help="each HTTP server's authorization status (never a token)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_auth_list)
    d = asub.add_parser("disconnect", help="revoke and forget a server's tokens and registration")
    d.add_argument("name")
    d.set_defaults(handler=cmd_auth_disconnect)


def cmd_new_key(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    out.write(crypto.new_key())
    return 0


def encrypted_fields() -> list[tuple[Any, list[str]]]:
    found = []
    for model in apps.get_models():
        names = [
            f.name
            for f in model._meta.concrete_fields
            if isinstance(f, crypto.EncryptedJSONField | crypto.EncryptedTextField)
        ]
        if names:
            found.append((model, names))
    return found


def rotate_all() -> int:
    """Re-encrypt every secret under the first key, all or nothing. Returns the values written."""
    written = 0
    with transaction.atomic():
        for model, names in encrypted_fields():
            for row in list(model.objects.values("pk", *names)):
                values = {name: row[name] for name in names}
                model.objects.filter(pk=row["pk"]).update(**values)
                written += sum(1 for v in values.values() if v not in (None, ""))
    return written


def cmd_rotate(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    try:
        written = rotate_all()
    except crypto.SecretUnreadable as exc:
        raise CommandError(f"nothing changed: {exc}") from None
    out.write(f"re-encrypted {written} secret value(s) under the first key; older keys can now be removed")
    return 0


def cmd_auth_list(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    rows = []
    credentials = {c.server_id: c for c in Credential.objects.all()}
    servers = (
        Server.objects.exclude(transport=Server.STDIO).select_related("credential").prefetch_related(live_states())
    )
    for server in servers.order_by("name"):
        c = credentials.get(server.pk)
        rows.append(
            {
                "server": server.name,
                "status": "needs_authorization" if server.needs_authorization else (c.status if c else "none"),
                "reason": c.reason if c else "",
                "scope": c.scope if c else "",
                "expires_at": c.expires_at.isoformat() if c and c.expires_at else None,
                "authorization_server": c.authorization_server if c else "",
            }
        )
    if options["json"]:
        out.write(json.dumps(rows, indent=2))
        return 0
    if not rows:
        out.write("no HTTP servers")
    for r in rows:
        extra = f"  scope={r['scope']}" if r["scope"] else ""
        extra += f"  expires={r['expires_at']}" if r["expires_at"] else ""
        extra += f"  ({r['reason']})" if r["reason"] else ""
        out.write(f"{r['server']:<24} {r['status']}{extra}")
    return 0


def cmd_auth_disconnect(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    server = Server.objects.filter(name=options["name"]).first()
    if server is None:
        raise CommandError(f"no server named {options['name']!r}")
    out.write(f"{server.name}: {flows.disconnect(server)}")
    return 0
