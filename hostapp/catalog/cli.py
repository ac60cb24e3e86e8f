"""`mcp import|export|servers|tools|refresh`."""

from __future__ import annotations

import argparse
import json
import logging
import queue
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.db import connection

from hostapp.core.gc_tuning import tuned_gc
from hostapp.mcp.config import ConfigError

from . import actions
from .models import Server, Tool
from .pool import refresh_server
from .rows import server_row, tool_row

logger = logging.getLogger(__name__)

# Servers `mcp refresh` lists at once: each waits on its server most of the time.
REFRESH_JOBS = 8


def register(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("import", help="import servers from an mcpServers JSON file")
    p.add_argument("file", help="a Claude Desktop / Cursor / VS Code config file, or - for stdin")
    p.add_argument("--refresh", action="store_true", help="list the imported servers' tools right away")
    _jobs_argument(p)
    p.set_defaults(handler=cmd_import)

    p = subparsers.add_parser("export", help="print the servers as an mcpServers JSON document")
    p.add_argument("--include-secrets", action="store_true", help="write env and header values in full")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(handler=cmd_export)

    p = subparsers.add_parser("servers", help="list the configured servers and their state")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_servers)

    p = subparsers.add_parser("tools", help="list the merged catalog")
    p.add_argument("--json", action="store_true")
    p.add_argument("--server", help="only this server's tools")
    p.add_argument("--status", choices=[Tool.ACTIVE, Tool.QUARANTINED])
    p.set_defaults(handler=cmd_tools)

    p = subparsers.add_parser("rename", help="the name and description agents are given for a tool")
    p.add_argument("tool", help="the tool's exposed name (server__tool)")
    p.add_argument("new_name", nargs="?", help="its name for agents (omitted: kept; the exposed name: no rename)")
    p.add_argument("--description", help="its description for agents (empty: the server's)")
    p.add_argument("--reset", action="store_true", help="agents get the exposed name and the server's description")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_rename)

    p = subparsers.add_parser("refresh", help="list tools again (all servers, or the ones named)")
    p.add_argument("names", nargs="*", metavar="NAME")
    _jobs_argument(p)
    p.set_defaults(handler=cmd_refresh)


def _jobs_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        default=REFRESH_JOBS,
        help=f"servers refreshed at once (default {REFRESH_JOBS})",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return value


def _read_document(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None


def cmd_import(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    document = _read_document(options["file"])
    try:
        result = actions.import_servers(document)
    except ConfigError as exc:
        raise CommandError(f"nothing imported: {exc}") from None
    for label, names in (("created", result.created), ("updated", result.updated), ("unchanged", result.unchanged)):
        if names:
            out.write(f"{label}: {', '.join(names)}")
    if options["refresh"]:
        return _refresh(result.created + result.updated + result.unchanged, out, err, options["jobs"])
    return 0


def cmd_export(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    text = json.dumps(actions.export_servers(include_secrets=options["include_secrets"]), indent=2) + "\n"
    if options["output"]:
        Path(options["output"]).write_text(text)
        return 0
    out.write(text, ending="")
    return 0


def cmd_servers(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    rows = [server_row(s, s.n_tools) for s in Server.objects.order_by("name").listed()]
    if options["json"]:
        out.write(json.dumps(rows, indent=2))
        return 0
    if not rows:
        out.write("No servers configured. Import some: manage.py mcp import servers/mcp.json")
        return 0
    out.write(f"{'NAME':<16} {'TRANSPORT':<9} {'STATE':<14} {'REVISION':<11} {'TOOLS':>5}  TRUSTED  ENABLED")
    for r in rows:
        out.write(
            f"{r['name']:<16} {r['transport']:<9} {r['state']:<14} {r['protocol_version'] or '-':<11} "
            f"{r['tool_count']:>5}  {'yes' if r['trusted'] else 'no':<7}  {'yes' if r['enabled'] else 'no'}"
        )
        if r["last_error"]:
            out.write(f"{'':<16} last error: {r['last_error']}")
    return 0


def cmd_tools(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    tools = Tool.objects.select_related("server").order_by("exposed_name")
    if options["server"]:
        tools = tools.filter(server__name=options["server"])
    if options["status"]:
        tools = tools.filter(status=options["status"])
    if options["json"]:
        out.write(json.dumps([tool_row(t) for t in tools], indent=2))
        return 0
    for t in tools:
        flag = "" if t.status == Tool.ACTIVE else f"  [{t.status}: {t.quarantine_reason}]"
        out.write(f"{t.exposed_name:<40} {t.get_effective_class_display():<12} {t.title or t.description[:60]}{flag}")
    return 0


def cmd_rename(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    tool = Tool.objects.select_related("server").filter(exposed_name=options["tool"]).first()
    if tool is None:
        raise CommandError(f"no tool named {options['tool']!r} (give its exposed name, server__tool)")
    if options["reset"]:
        name, description = "", ""
    else:
        name = options["new_name"] if options["new_name"] is not None else tool.agent_name
        description = options["description"] if options["description"] is not None else tool.agent_description
    try:
        actions.set_override(tool, name, description, None)
    except actions.OverrideError as exc:
        raise CommandError(f"not changed: {exc}") from None
    if options["json"]:
        out.write(json.dumps(tool_row(tool), indent=2))
    elif tool.overridden:
        described = "an admin's description" if tool.agent_description else "the server's description"
        out.write(f"agents now call {tool.exposed_name} {tool.name_for_agents}, with {described}")
    else:
        out.write(f"agents now call {tool.exposed_name} by that name, with the server's description")
    return 0


def _refresh_one(server: Server) -> actions.RefreshResult:
    """A refresh that raises (a database error, say) is a failed result, not the end of the run."""
    try:
        return refresh_server(server)
    except Exception as exc:  # boundary: reported as this server's failure
        logger.exception("refresh of %s failed", server.name)
        return actions.RefreshResult(server.name, ok=False, error=f"{type(exc).__name__}: {exc}")


def _refresh_each(servers: list[Server], jobs: int) -> Iterator[tuple[Server, actions.RefreshResult]]:
    """Refresh the servers, `jobs` at a time; yield each with its result as it finishes.

    Each worker thread keeps its database session for its servers and closes it when done.
    When the caller stops early (Ctrl-C), the refreshes under way finish and no more start.
    """
    if jobs == 1 or len(servers) == 1:  # in this thread, in its session
        for server in servers:
            yield server, _refresh_one(server)
        return
    work: queue.SimpleQueue[Server] = queue.SimpleQueue()
    for server in servers:
        work.put(server)
    done: queue.SimpleQueue[tuple[Server, actions.RefreshResult]] = queue.SimpleQueue()

    def worker() -> None:
        try:
            while True:
                try:
                    server = work.get_nowait()
                except queue.Empty:
                    return
                done.put((server, _refresh_one(server)))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, name=f"mcp-refresh-{i}") for i in range(min(jobs, len(servers)))]
    for thread in threads:
        thread.start()
    try:
        for _ in servers:
            yield done.get()
    finally:
        while True:  # nothing more starts
            try:
                work.get_nowait()
            except queue.Empty:
                break
        for thread in threads:
            thread.join()


def _refresh(names: list[str], out: OutputWrapper, err: OutputWrapper, jobs: int = 1) -> int:
    failed = 0
    # Named servers are refreshed as asked (a disabled one is reported); "all" means the enabled ones.
    servers = (
        list(Server.objects.filter(name__in=names).order_by("name"))
        if names
        else list(Server.objects.filter(enabled=True).order_by("name"))
    )
    missing = sorted(set(names) - {s.name for s in servers})
    for name in missing:
        err.write(f"{name}: no such server")
        failed += 1
    with tuned_gc():  # collect garbage as the worker does while it refreshes
        for i, (server, result) in enumerate(_refresh_each(servers, jobs), 1):
            failed += _report(i, len(servers), server, result, out, err)
    return 1 if failed else 0


def _report(
    i: int, total: int, server: Server, result: actions.RefreshResult, out: OutputWrapper, err: OutputWrapper
) -> int:
    """One line for a refreshed server (and its error on stderr); 1 if it failed."""
    if not result.ok:
        out.write(f"[{i}/{total}] {server.name}: failed")
        err.write(f"{server.name}: {result.error}")
        out.flush()
        return 1
    extra = [
        f"{len(items)} {label}"
        for label, items in (
            ("added", result.added),
            ("changed", result.changed),
            ("removed", result.removed),
            ("quarantined", result.quarantined),
        )
        if items
    ]
    offers = ""
    if result.prompts or result.resources:
        offers = f"; {result.prompts} prompts, {result.resources} resources and templates"
        if result.offers_quarantined:
            offers += f" ({len(result.offers_quarantined)} quarantined)"
    out.write(
        f"[{i}/{total}] {server.name}: {result.tools} tools" + (f" ({', '.join(extra)})" if extra else "") + offers
    )
    if result.offers_error:
        err.write(f"{server.name}: its prompts and resources could not be listed: {result.offers_error}")
    out.flush()
    return 0


def cmd_refresh(options: dict[str, Any], out: OutputWrapper, err: OutputWrapper) -> int:
    return _refresh(options["names"], out, err, options["jobs"])
