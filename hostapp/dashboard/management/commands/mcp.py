"""`manage.py mcp ...`: the host from the command line.

Each app contributes its subcommands (a `cli.py` module with `register(subparsers)`);
every handler returns an exit code: 0 done, non-zero with a one-line reason on stderr.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

CLI_MODULES = (
    "hostapp.catalog.cli",
    "hostapp.calls.cli",
    "hostapp.outbox.cli",
    "hostapp.gateway.cli",
    "hostapp.oauth.cli",
)


class Command(BaseCommand):
    help = "Manage MCP servers, tools, calls and the outbox. `mcp <subcommand> --help` for each."

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
        for module_name in CLI_MODULES:
            importlib.import_module(module_name).register(subparsers)

    def handle(self, *args: Any, **options: Any) -> None:
        handler = options.pop("handler")
        try:
            code = handler(options, self.stdout, self.stderr)
        except CommandError:
            raise
        except KeyboardInterrupt:
            raise CommandError("interrupted", returncode=130) from None
        if code:
            sys.stdout.flush()
            raise SystemExit(code)
