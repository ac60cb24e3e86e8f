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


# Every rule, by server and then tool name ("" for the server's own rule): `decide` for many
# tools at once reads them once (the agents' tool list).
Rules = dict[str, dict[str, Rule]]


def all_rules() -> Rules:
    rules: Rules = {}
    for r in Rule.objects.order_by().only("server_name", "tool_name", "action", "reason"):
        rules.setdefault(r.server_name, {})[r.tool_name] = r
    return rules


def rule_for(tool: Tool, rules: Rules | None = None) -> Rule | None:
    if rules is not None:
        found = rules.get(tool.server.name, {})
    else:
        found = {
            r.tool_name: r
            for r in Rule.objects.filter(server_name=tool.server.name, tool_name__in=["", tool.exposed_name])
            .order_by()
            .only("tool_name", "action", "reason")
        }
    return found.get(tool.exposed_name) or found.get("")


def decide(tool: Tool, rules: Rules | None = None) -> Decision:
    """`rules`: every rule, read before (`all_rules`); without them the tool's are read."""
    if tool.status != Tool.ACTIVE:
        why = (
            "it is new and not reviewed yet"
            if tool.quarantine_reason == Tool.NEW
            else "it changed since it was accepted"
        )
        return Decision(Call.REFUSE, f"{tool.exposed_name} is quarantined: {why}; a person must review it first")
    if not tool.server.enabled:
        return Decision(Call.REFUSE, f"the server {tool.server.name} is disabled")
    rule = rule_for(tool, rules)
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
