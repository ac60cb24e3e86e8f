"""`manage.py mcp ...`: the host from the command line.

Each app contributes its subcommands (a `cli.py` module with `register(subparsers)`);
every handler returns an exit code: 0 done, non-zero with a one-line reason on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from hostapp.calls import cli as calls_cli
from hostapp.catalog import cli as catalog_cli
from hostapp.gateway import cli as gateway_cli
from hostapp.oauth import cli as oauth_cli
from hostapp.outbox import cli as outbox_cli

CLI_MODULES = (catalog_cli, calls_cli, outbox_cli, gateway_cli, oauth_cli)

NOT_SET_UP = "the database is not set up yet: run `python manage.py migrate` or `make run` first"


def unapplied_migrations() -> int:
    """How many migrations the database still lacks (every app's)."""
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def database_problem(exc: DatabaseError) -> str:
    """A one-line reason for a database error a subcommand met: the database is not set up
    (no tables yet, or not every migration), or what the database said."""
    try:
        missing = unapplied_migrations()
    except DatabaseError as again:
        return f"the database cannot be used: {str(again).strip().splitlines()[0] if str(again).strip() else again!r}"
    if missing:
        return NOT_SET_UP
    first = str(exc).strip().splitlines()
    return f"the database refused the command: {first[0] if first else type(exc).__name__}"


class Command(BaseCommand):
    help = "Manage MCP servers, tools, calls and the outbox. `mcp <subcommand> --help` for each."

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
        for module in CLI_MODULES:
            module.register(subparsers)

    def handle(self, *args: Any, **options: Any) -> None:
        handler = options.pop("handler")
        try:
            code = handler(options, self.stdout, self.stderr)
        except CommandError:
            raise
        except DatabaseError as exc:
            raise CommandError(database_problem(exc)) from None
        except KeyboardInterrupt:
            raise CommandError("interrupted", returncode=130) from None
        if code:
            sys.stdout.flush()
            raise SystemExit(code)
