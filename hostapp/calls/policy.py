"""The policy: what happens to a call, decided from the tool's class and the admins' rules.

=============== ============================================================
read-only        runs at once
write            goes through the outbox
destructive      waits for a person to approve, then goes through the outbox
rule ``allow``   no approval is asked (the class still picks run or outbox)
rule ``ask``     a person approves first, whatever the class
rule ``block``   refused, with the rule's reason
=============== ============================================================

A tool rule wins over a server rule. A quarantined tool, or one of a disabled server,
is never called.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostapp.catalog.models import DESTRUCTIVE, READ_ONLY, Tool

from .models import Call, Rule


@dataclass(frozen=True)
class Decision:
    kind: str  # Call.RUN, Call.OUTBOX, Call.ASK or Call.REFUSE
    reason: str
    rule: Rule | None = None


def rule_for(tool: Tool) -> Rule | None:
    rules = {
        r.tool_name: r
        for r in Rule.objects.filter(server_name=tool.server.name, tool_name__in=["", tool.exposed_name])
        .order_by()
        .only("tool_name", "action", "reason")
    }
    return rules.get(tool.exposed_name) or rules.get("")


def decide(tool: Tool) -> Decision:
    if tool.status != Tool.ACTIVE:
        why = (
            "it is new and not reviewed yet"
            if tool.quarantine_reason == Tool.NEW
            else "it changed since it was accepted"
        )
        return Decision(Call.REFUSE, f"{tool.exposed_name} is quarantined: {why}; a person must review it first")
    if not tool.server.enabled:
        return Decision(Call.REFUSE, f"the server {tool.server.name} is disabled")
    rule = rule_for(tool)
    scope = "tool" if rule is not None and rule.tool_name else "server"
    if rule is not None and rule.action == Rule.BLOCK:
        return Decision(Call.REFUSE, rule.reason or f"blocked by a {scope} rule", rule)
    cls = tool.effective_class
    if rule is not None and rule.action == Rule.ASK:
        return Decision(Call.ASK, rule.reason or f"a {scope} rule asks for approval", rule)
    if cls == DESTRUCTIVE and not (rule is not None and rule.action == Rule.ALLOW):
        return Decision(Call.ASK, "destructive tools need a person's approval")
    allowed = f" (allowed by a {scope} rule)" if rule is not None else ""
    if cls == READ_ONLY:
        return Decision(Call.RUN, "read-only" + allowed, rule)
    return Decision(Call.OUTBOX, ("write" if cls != DESTRUCTIVE else "destructive") + allowed, rule)
