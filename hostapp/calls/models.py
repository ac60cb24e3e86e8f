from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from hostapp.catalog.models import CLASS_CHOICES


class Rule(models.Model):
    """An admin's decision for a whole server or one tool: allow, ask or block."""

    ALLOW, ASK, BLOCK = "allow", "ask", "block"
    ACTIONS = [(ALLOW, "allow without asking"), (ASK, "ask a person first"), (BLOCK, "block")]

    server_name = models.CharField(max_length=32)
    # Empty: the rule covers every tool of the server.
    tool_name = models.CharField(max_length=64, blank=True, help_text="An exposed tool name, or empty for all.")
    action = models.CharField(max_length=8, choices=ACTIONS)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    source = models.CharField(max_length=200, blank=True, help_text="Where the rule came from (admin, an approval).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server_name", "tool_name"], name="one_rule_per_scope")]
        ordering = ["server_name", "tool_name"]

    def __str__(self) -> str:
        scope = self.tool_name or f"{self.server_name} (all tools)"
        return f"{self.action} {scope}"


class Call(models.Model):
    """One tool call, from a person, the CLI or an agent: the ledger row (written by `life`)."""

    # Statuses
    WAITING = "waiting"  # for a person to approve
    INPUT = "input"  # running, and its server waits for input (an InputRequest)
    QUEUED = "queued"  # in the outbox
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"  # its delivery is a dead letter: a person redrives or discards it
    UNKNOWN = "unknown"  # outcome unknown: a person decides
    DENIED = "denied"
    EXPIRED = "expired"
    BLOCKED = "blocked"
    STATUSES = [
        (WAITING, "waiting for approval"),
        (QUEUED, "queued"),
        (RUNNING, "running"),
        (INPUT, "waiting for input"),
        (SUCCEEDED, "succeeded"),
        (FAILED, "failed"),
        (DEAD, "dead letter"),
        (UNKNOWN, "outcome unknown"),
        (DENIED, "denied"),
        (EXPIRED, "expired"),
        (BLOCKED, "blocked"),
    ]
    FINAL = (SUCCEEDED, FAILED, DENIED, EXPIRED, BLOCKED)
    # Nothing more happens to these without a person (a dead letter, an unknown outcome):
    # whoever waits for the call's end stops waiting.
    PARKED = (DEAD, UNKNOWN)

    # Decisions
    RUN, OUTBOX, ASK, REFUSE = "run", "outbox", "ask", "refuse"
    DECISIONS = [(RUN, "run at once"), (OUTBOX, "through the outbox"), (ASK, "ask first"), (REFUSE, "refused")]

    # Requesters
    USER, CLI, AGENT = "user", "cli", "agent"
    REQUESTERS = [(USER, "user"), (CLI, "command line"), (AGENT, "agent")]

    # When the call was made (a row written when it has finished is given its call's start).
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    requester_kind = models.CharField(max_length=8, choices=REQUESTERS)
    requester_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="calls"
    )
    requester_name = models.CharField(max_length=150, help_text="Who asked: a username, 'cli', an agent's name.")
    requester_agent = models.ForeignKey(
        "gateway.AgentToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="calls"
    )

    server_name = models.CharField(max_length=32)
    tool_name = models.CharField(max_length=64, help_text="The exposed name.")
    original_name = models.CharField(max_length=512)
    tool = models.ForeignKey("catalog.Tool", null=True, blank=True, on_delete=models.SET_NULL, related_name="calls")
    tool_class = models.CharField(max_length=12, choices=CLASS_CHOICES)
    definition_hash = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    argument_digest = models.CharField(max_length=64)

    decision = models.CharField(max_length=8, choices=DECISIONS)
    decision_reason = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=10, choices=STATUSES)

    approval_expires_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="decided_calls"
    )
    decided_by_name = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    denial_reason = models.CharField(max_length=1000, blank=True)

    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    error = models.JSONField(null=True, blank=True)
    # A key the requester's form (or an API client's Idempotency-Key) sent with the call: the
    # same requester submitting the same key again gets this call, not a second one.
    submit_key = models.CharField(max_length=64, blank=True, default="")

    # A person's answer to its approval request ("": none was asked, or nobody answered):
    # what suggestions learn from (hostapp/calls/suggest.py).
    APPROVED, REFUSED_BY_PERSON = "approved", "denied"
    approval = models.CharField(max_length=8, blank=True, default="")
    # The host decided it on the suggestion's verdict (an opt-in, `ApprovalCost.act`), not a
    # person: such answers are not learned from, nor scored.
    decided_by_suggestion = models.BooleanField(default=False)
    # What the suggestion said when the call began to wait ({"verdict", "probability",
    # "basis", ...}; hostapp/calls/suggest.py): made before anyone decided, so it is also
    # what its calibration is measured on.
    suggestion = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["requester_kind", "requester_name", "submit_key"],
                condition=~models.Q(submit_key=""),
                name="one_call_per_submit_key",
            )
        ]
        indexes = [
            # The Pending page and the navigation badge: waiting calls, oldest first.
            models.Index(fields=["status", "id"], name="call_status_id"),
            # Filters of the Calls page.
            models.Index(fields=["server_name", "id"], name="call_server_id"),
            models.Index(fields=["tool_name", "id"], name="call_tool_id"),
            models.Index(fields=["requester_name", "id"], name="call_requester_id"),
            # Past approvals and denials of a tool, newest first (suggestions learn from them).
            models.Index(
                fields=["tool_name", "decided_at"], condition=~models.Q(approval=""), name="call_tool_approvals"
            ),
        ]
        permissions = [("approve_call", "Can approve or deny calls to destructive tools")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.tool_name} ({self.status})"

    @property
    def final(self) -> bool:
        return self.status in self.FINAL

    @property
    def ended(self) -> bool:
        """Final, or parked until a person acts: nothing more happens by itself."""
        return self.status in self.FINAL or self.status in self.PARKED

    @property
    def error_heading(self) -> str:
        """How the call page introduces its error."""
        kind = (self.error or {}).get("kind", "")
        return ERROR_HEADINGS.get(kind) or f"{str(kind).capitalize() or 'An'} error"

    def summary(self) -> dict[str, Any]:
        """What a caller is told: the CLI's --json, the agents' status tool, the API."""
        return {
            "call_id": self.pk,
            "tool": self.tool_name,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "is_error": self.is_error,
            "denial_reason": self.denial_reason or None,
            "approval_expires_at": self.approval_expires_at.isoformat() if self.approval_expires_at else None,
        }


ERROR_HEADINGS = {
    "tool": "The tool reported an error",
    "policy": "Refused by the policy",
    "discarded": "Discarded",
    "ambiguous": "Outcome unknown",
}


class CallEvent(models.Model):
    """The history of a call, one row per thing that happened to it."""

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, editable=False)
    kind = models.CharField(max_length=24)
    actor = models.CharField(max_length=150, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]

    # The words of the history: the same as the states' where an event makes one.
    WORDS = {
        "created": "asked",
        "approved": "approved",
        "denied": "denied",
        "expired": "expired",
        "blocked": "blocked",
        "succeeded": "succeeded",
        "failed": "failed",
        "retry_scheduled": "failed, to be retried",
        "dead_lettered": "dead letter",
        "outcome_unknown": "outcome unknown",
        "lease_expired": "worker lost",
        "redriven": "redriven",
        "discarded": "discarded",
        "done": "marked done",
        "rule_created": "rule created",
        "rule_kept": "rule kept",
        "queued": "queued",
        "input_requested": "asked for input",
        "input_answered": "input given",
        "input_declined": "input declined",
        "input_cancelled": "input cancelled",
        "input_expired": "input not given in time",
        "input_withdrawn": "input no longer needed",
    }

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor or 'the host'}"

    @property
    def word(self) -> str:
        return self.WORDS.get(self.kind, self.kind.replace("_", " "))


class ApprovalCost(models.Model):
    """What mistakes of an approval cost, for one tool, one server, one class, or every call
    (all three blank): the suggestion's verdict follows from them (hostapp/calls/suggest.py).
    The most specific row wins: a tool's, then its server's, then its class's, then the
    default row; without any, the built-in costs of its class."""

    server_name = models.CharField(max_length=32, blank=True, help_text="With a tool name: that tool.")
    tool_name = models.CharField(max_length=64, blank=True, help_text="An exposed tool name (its server's too).")
    tool_class = models.CharField(max_length=12, choices=CLASS_CHOICES, blank=True)
    wrong_allow = models.FloatField(help_text="The cost of allowing a call a person would have denied.")
    wrong_block = models.FloatField(help_text="The cost of blocking a call a person would have approved.")
    ask = models.FloatField(help_text="The cost of asking a person (their time, the agent's wait).")
    # Off by default: the host acts on the verdict for this tool or server (allow or deny at
    # once, on record as decided by the suggestion); for a destructive tool only after
    # PATCHBAY_AUTO_DECIDE_MIN_ANSWERS past answers. A class or the default row cannot.
    act = models.BooleanField(
        default=False, help_text="Act on the verdict: allow or deny without waiting (a tool or server only)."
    )
    note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server_name", "tool_name", "tool_class"], name="one_cost_per_scope"),
            models.CheckConstraint(
                condition=models.Q(wrong_allow__gt=0, wrong_block__gt=0, ask__gt=0), name="costs_positive"
            ),
        ]
        ordering = ["server_name", "tool_name", "tool_class"]

    def __str__(self) -> str:
        return f"costs of {self.scope}"

    def clean(self) -> None:
        """One scope: a tool (its server is the one its name begins with), a server, or a class."""
        if self.tool_name:
            server, sep, _ = self.tool_name.partition("__")
            if not sep:
                raise ValidationError({"tool_name": "give the exposed name, server__tool"})
            self.server_name = server
        if self.tool_class and self.server_name:
            raise ValidationError({"tool_class": "a class covers every server: leave the server and tool empty"})
        if self.act and not self.server_name:
            raise ValidationError({"act": "only a tool's or a server's costs may let the host act on the verdict"})

    @property
    def scope(self) -> str:
        if self.tool_name:
            return self.tool_name
        if self.server_name:
            return f"{self.server_name} (every tool)"
        if self.tool_class:
            return f"{self.get_tool_class_display()} tools"
        return "every call"


class ApprovalNotice(models.Model):
    """A call that began to wait for a person, its approvers not yet told (hostapp/calls/notify.py).

    Written with the wait (in its transaction, when there is one), taken by the send that
    names it, deleted once that send is done: the rows are what no message has named yet.
    Rows live seconds, so the table stays small and needs no index of its own.
    """

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    # The send that took it ("": none yet), and when: a send whose worker died is taken again.
    batch = models.CharField(max_length=32, blank=True, default="")
    taken_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"notice of call #{self.call_id}" + (f" (taken by {self.batch})" if self.batch else "")


class Read(models.Model):
    """One read of what a server offers besides tools: a resource read, or a prompt filled in.

    On record as calls are (who, what, when, how it ended), written by
    `hostapp.calls.reads` whoever reads: a person on the catalog's pages, the CLI, an agent
    on /mcp. The contents are not kept, only their size and types: a resource is read
    again on demand, and may be large.
    """

    RESOURCE, PROMPT = "resource", "prompt"
    KINDS = [(RESOURCE, "resource read"), (PROMPT, "prompt filled in")]
    OK, FAILED, REFUSED = "ok", "failed", "refused"
    # A 2026-07-28 server answered with a round of requests for input, handed to the agent
    # (`parts`: each request's key and method); its read with the answers is a row of its own.
    INPUT = "input"
    OUTCOMES = [(OK, "read"), (FAILED, "failed"), (REFUSED, "refused"), (INPUT, "asked for input")]

    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    requester_kind = models.CharField(max_length=8, choices=Call.REQUESTERS)
    requester_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="reads"
    )
    requester_name = models.CharField(max_length=150)
    requester_agent = models.ForeignKey(
        "gateway.AgentToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="reads"
    )
    server_name = models.CharField(max_length=32)
    kind = models.CharField(max_length=8, choices=KINDS)
    # The resource's URI as its server knows it, or the prompt's exposed name.
    target = models.TextField()
    arguments = models.JSONField(default=dict, blank=True)  # a prompt's
    outcome = models.CharField(max_length=8, choices=OUTCOMES)
    error = models.JSONField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    # What came back: bytes of text and of decoded blobs, and each part's type.
    size = models.BigIntegerField(null=True, blank=True)
    parts = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["server_name", "id"], name="read_server_id")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.target} by {self.requester_name}"

    @property
    def asked_for(self) -> str:
        """What a read that asked for input asked for: its requests' methods, each once."""
        if self.outcome != self.INPUT:
            return ""
        methods = [str(p.get("method", "")) for p in self.parts if isinstance(p, dict)]
        return ", ".join(dict.fromkeys(m for m in methods if m))


class InputRequest(models.Model):
    """A server's request for input in the middle of a call (`elicitation/create` in the 2025
    era, an `input_required` result's request in 2026-07-28), and its answer: written by
    `hostapp.calls.inputs` only.

    What the server sent (message, schema, URL) is untrusted: sanitized and capped when it is
    written, escaped when shown. The answer is part of the call's record: shown only to whoever
    may answer it (the call's requester, approvers), never logged.
    """

    FORM, URL = "form", "url"
    MODES = [(FORM, "form"), (URL, "open a URL")]
    OPEN = "open"
    ACCEPTED, DECLINED, CANCELLED = "accept", "decline", "cancel"
    EXPIRED, WITHDRAWN = "expired", "withdrawn"
    STATUSES = [
        (OPEN, "waiting for an answer"),
        (ACCEPTED, "answered"),
        (DECLINED, "declined"),
        (CANCELLED, "cancelled"),
        (EXPIRED, "not answered in time"),
        (WITHDRAWN, "no longer needed"),
    ]
    ANSWERS = (ACCEPTED, DECLINED, CANCELLED)
    # Who answered: a person in the browser, the CLI or the API; the agent's own client; the host.
    PERSON, AGENT, HOST = "person", "agent", "host"
    ANSWERERS = [(PERSON, "a person"), (AGENT, "the agent's client"), (HOST, "the host")]

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="inputs")
    server_name = models.CharField(max_length=32)
    mode = models.CharField(max_length=4, choices=MODES, default=FORM)
    message = models.TextField()
    requested_schema = models.JSONField(null=True, blank=True)
    # Its fields' names in the server's order (PostgreSQL's jsonb keeps no key order): `schema`.
    field_order = models.JSONField(default=list, blank=True)
    url = models.TextField(blank=True)
    elicitation_id = models.CharField(max_length=200, blank=True)
    # The request's key in a 2026-07-28 `inputRequests` ("": a 2025-era request), and its round.
    key = models.CharField(max_length=200, blank=True)
    round = models.PositiveIntegerField(default=1)
    # A form that asks for what looks like a password, a token or a key (shown with a warning).
    sensitive = models.BooleanField(default=False)
    # Nobody holds the call while it waits: once its requests are answered, it goes back to
    # the outbox and is delivered with the answers (a 2026-07-28 server's round).
    resumes = models.BooleanField(default=False)
    # A round handed to a 2026-07-28 agent's own client: the agent comes back with the answer
    # (its call again); if it does not within the wait, the call fails.
    agent_round = models.BooleanField(default=False)

    status = models.CharField(max_length=10, choices=STATUSES, default=OPEN)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    content = models.JSONField(null=True, blank=True)
    answered_via = models.CharField(max_length=8, choices=ANSWERERS, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_by_name = models.CharField(max_length=150, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The Input queue and the navigation badge: open requests, oldest first.
            models.Index(fields=["status", "id"], name="input_status_id"),
        ]

    def __str__(self) -> str:
        return f"input request #{self.pk} of call #{self.call_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status == self.OPEN

    @property
    def schema(self) -> dict[str, Any] | None:
        """The requested schema, its fields in the order the server gave them."""
        if self.requested_schema is None:
            return None
        properties = self.requested_schema.get("properties") or {}
        order = [name for name in self.field_order if name in properties]
        order += [name for name in properties if name not in order]
        return {**self.requested_schema, "properties": {name: properties[name] for name in order}}

    def summary(self) -> dict[str, Any]:
        """What the CLI's --json, the API and the Input queue say of it (never the answer)."""
        return {
            "id": self.pk,
            "call_id": self.call_id,
            "server": self.server_name,
            "mode": self.mode,
            "message": self.message,
            "requested_schema": self.schema,
            "url": self.url or None,
            "sensitive": self.sensitive,
            "status": self.status,
            "round": self.round,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "answered_via": self.answered_via or None,
            "answered_by": self.answered_by_name or None,
            "answered_at": self.answered_at.isoformat() if self.answered_at else None,
        }
