from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker proved it runs tasks (the beat schedules a ping)."""

    hostname = models.CharField(max_length=255, unique=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.hostname} at {self.seen_at:%Y-%m-%d %H:%M:%S}"


class Process(models.Model):
    """A running Patchbay process that holds connections to MCP servers (a web process, a
    worker, a command): what it reports of each server is its own (`catalog.ServerState`).
    It refreshes `seen_at` while it lives and deletes its row when it stops; a row not seen
    for a while is a process that died (hostapp/core/processes.py)."""

    name = models.CharField(max_length=255, unique=True)  # role@hostname:pid
    role = models.CharField(max_length=16)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["role", "name"]
        # Which processes are alive, and which are gone: by when each was last seen.
        indexes = [models.Index(fields=["seen_at"], name="process_seen")]

    def __str__(self) -> str:
        return self.name
