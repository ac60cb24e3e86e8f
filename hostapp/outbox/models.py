from __future__ import annotations

import uuid

from django.db import models


def new_key() -> str:
    return uuid.uuid4().hex


class Action(models.Model):
    """A side-effecting call waiting to be delivered; written with its call, in one transaction."""

    PENDING = "pending"  # due at next_attempt_at
    LEASED = "leased"  # a worker holds it until lease_until
    DONE = "done"
    DEAD = "dead"  # dead letter: a person decides
    UNKNOWN = "unknown"  # outcome unknown: a person decides
    DISCARDED = "discarded"
    # Its server (2026-07-28) asked for input: no worker holds it while a person answers;
    # answered, it is pending again, and delivered with the answers and the same key.
    INPUT = "input"
    STATUSES = [
        (PENDING, "pending"),
        (LEASED, "delivering"),
        (DONE, "done"),
        (DEAD, "dead letter"),
        (UNKNOWN, "outcome unknown"),
        (DISCARDED, "discarded"),
        (INPUT, "waiting for input"),
    ]

    call = models.OneToOneField("calls.Call", on_delete=models.CASCADE, related_name="action")
    status = models.CharField(max_length=10, choices=STATUSES, default=PENDING)
    idempotency_key = models.CharField(max_length=64, unique=True, default=new_key)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    next_attempt_at = models.DateTimeField()
    # When a worker was last woken for it; the sweeper wakes one again if that was long ago.
    queued_at = models.DateTimeField(auto_now_add=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    leased_by = models.CharField(max_length=200, blank=True)
    last_error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    resolution = models.CharField(max_length=1000, blank=True)
    alerted = models.BooleanField(default=False)
    # The round of input it waits for (INPUT), and then delivers with: the server's
    # `requestState` ("state", never shown) and its requests' rows by key ("inputs").
    input_round = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The sweeper: due pending actions, and leases that ran out.
            models.Index(fields=["status", "next_attempt_at"], name="action_due"),
            models.Index(fields=["status", "lease_until"], name="action_lease"),
        ]
        permissions = [("manage_outbox", "Can redrive, discard or resolve outbox actions")]

    def __str__(self) -> str:
        return f"action #{self.pk} ({self.status})"


class Attempt(models.Model):
    """One delivery attempt of an action, kept for the dead-letter page's history."""

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20)  # succeeded, retry, dead, unknown, lease_expired
    error = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["action_id", "number"]
        constraints = [models.UniqueConstraint(fields=["action", "number"], name="one_attempt_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of action #{self.action_id}: {self.outcome}"
