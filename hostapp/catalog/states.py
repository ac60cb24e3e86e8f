"""What this process's client pool sees of servers, stored as this process's own.

Each process that holds connections (the web process, each worker, a command) writes one
`ServerState` row per server, keyed by its `Process` row (hostapp/core/processes.py): the
Servers page shows each and sums them up by the worst (`Server.state`). What the server
said of itself at the handshake (its revision, info, capabilities, instructions) is the
server's, whichever process heard it.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from hostapp.core import processes
from hostapp.core.events import send_event_on_commit
from hostapp.core.jsonvalues import storable
from hostapp.mcp import ServerStatus
from hostapp.mcp.sanitize import clean_text

from .models import Server, ServerState


def record_statuses(statuses: list[ServerStatus]) -> None:
    """Store what this process's pool saw of servers (state, errors, stderr; what they said
    of themselves), in one transaction: many servers connecting at once report together."""
    if not statuses:
        return
    now = timezone.now()
    with transaction.atomic():
        process = processes.register()  # this process's row, seen now
        # Locked while the states are written: a server deleted meanwhile would fail the batch.
        servers = Server.objects.select_for_update().filter(name__in=[s.name for s in statuses])
        ids = dict(servers.values_list("name", "pk"))
        rows = [
            ServerState(
                server_id=ids[status.name],
                process=process,
                state=status.state,
                state_at=now,
                last_error=storable(status.last_error),
                stderr_tail=storable(list(status.stderr_tail)),
            )
            for status in statuses
            if status.name in ids
        ]
        ServerState.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["server", "process"],
            update_fields=["state", "state_at", "last_error", "stderr_tail"],
        )
        for status in statuses:
            if status.name in ids and status.protocol_version:
                Server.objects.filter(pk=ids[status.name]).update(
                    protocol_version=status.protocol_version,
                    server_info=storable(status.server_info),
                    capabilities=storable(status.capabilities),
                    instructions=clean_text(status.instructions),
                )
        for status in statuses:
            if status.name in ids:
                send_event_on_commit("server.changed", {"names": [status.name], "state": status.state})


def forget_server(name: str) -> None:
    """This process no longer runs the server (removed from its pool): its state goes."""
    ServerState.objects.filter(server__name=name, process__name=processes.name()).delete()


def config_changed(server: Server) -> None:
    """The server's configuration changed (enabled, disabled, edited): what each process saw
    of the old one is gone. Each reports again when its pool picks the change up."""
    ServerState.objects.filter(server=server).delete()


def authorization_given(server: Server) -> None:
    """A person connected the server (OAuth): no process waits for that any more. Each
    reports its own state again when its pool next connects with the new credentials."""
    ServerState.objects.filter(server=server, state="needs-authorization").update(state="idle", last_error=None)
