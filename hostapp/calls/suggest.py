"""Suggestions for approvers: how likely a person is to approve a waiting call, learned from
the answers people gave to similar calls, and the verdict the costs of mistakes make of it.

The model. A call is described by a set of features: who asked, which argument fields it
gave, and the value of each short scalar argument (`features`), but for fields whose values
are new nearly every time (a subject line: `free_fields`), which count by presence only.
Past answers to calls of the same tool (at most `HISTORY`, newest first) each count with a
weight: how alike the two calls are (the Jaccard similarity of their features) raised to
`SHARPNESS`, so that an answer to a call with the same arguments counts fully and one to a
call with another value counts little. The probability of an approval is the mean of a Beta(1, 1) prior updated by
those weighted answers:

    p = (1 + sum of weights of approvals) / (2 + sum of all weights)

Seen as a kernel estimate it is calibrated where the history is dense: among past calls
that look like this one, that share was approved. Where it is thin, the prior pulls it to
one half, and with less than `MIN_EVIDENCE` of weight in all the verdict is "ask" whatever
the costs. It can be wrong: a value never seen before counts as a difference, not as
danger; a person who changes their mind is learned from only as later answers accumulate;
two fields that matter only together are seen one at a time.

The verdict follows from the costs (`ApprovalCost`: a wrong allow, a wrong block, asking):
the action whose expected cost is lowest, and "ask" on a tie. Allowing costs (1 - p) times
a wrong allow; blocking costs p times a wrong block; asking costs its own price.

It fails closed: a prediction that raises, or that took longer than
`PATCHBAY_SUGGEST_LIMIT` seconds, is "ask", never "allow".

Where an admin opted in (`ApprovalCost.act`, for a tool or a server), the host acts on an
allow or a block at once (`hostapp.calls.actions.start_call`); such decisions are marked as
the suggestion's, and neither learned from nor scored.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from hostapp.catalog.models import DESTRUCTIVE, READ_ONLY, WRITE

from .models import ApprovalCost, Call

logger = logging.getLogger(__name__)

ALLOW, ASK, BLOCK = "allow", "ask", "block"
# The latest answers to a tool's calls that a suggestion reads.
HISTORY = 500
# Below this much weight of evidence in all, the verdict is "ask".
MIN_EVIDENCE = 3.0
SHARPNESS = 4
# A field whose values are mostly distinct (a subject, a timestamp) is compared by presence only.
FREE_SHARE = 0.5
FREE_MIN = 4
# Argument values longer than this are described by their field only.
VALUE_CAP = 100
MAX_FEATURES = 64
# How many of the answers it rests on are shown (the heaviest).
BASIS_SHOWN = 5

# Without an ApprovalCost row: a wrong allow, a wrong block, asking, by class.
DEFAULT_COSTS = {
    READ_ONLY: (5.0, 5.0, 1.0),
    WRITE: (10.0, 5.0, 1.0),
    DESTRUCTIVE: (50.0, 5.0, 1.0),
}


def _cheaper(x: float, y: float) -> bool:
    """`x < y` by more than a rounding error (0.1 * 10 is not less than 1)."""
    return x < y - 1e-9 * max(1.0, abs(y))


@dataclass(frozen=True)
class Costs:
    wrong_allow: float
    wrong_block: float
    ask: float
    scope: str = "built in"
    act: bool = False  # an admin lets the host act on the verdict (ApprovalCost.act)

    def verdict(self, p: float) -> str:
        """The action with the lowest expected cost; "ask" where it ties with another."""
        allow, block = (1 - p) * self.wrong_allow, p * self.wrong_block
        if _cheaper(allow, self.ask) and _cheaper(allow, block):
            return ALLOW
        if _cheaper(block, self.ask) and _cheaper(block, allow):
            return BLOCK
        return ASK

    @property
    def allow_above(self) -> float:
        """Allow when p is above this: (1 - p) * wrong_allow < ask, and < p * wrong_block."""
        return max(1 - self.ask / self.wrong_allow, self.wrong_allow / (self.wrong_allow + self.wrong_block))

    @property
    def block_below(self) -> float:
        """Block when p is below this: p * wrong_block < ask, and < (1 - p) * wrong_allow."""
        return min(self.ask / self.wrong_block, self.wrong_allow / (self.wrong_allow + self.wrong_block))


@dataclass(frozen=True)
class Basis:
    call_id: int
    approval: str
    weight: float


@dataclass
class Suggestion:
    verdict: str
    probability: float | None
    evidence: float  # the weight of the answers it rests on
    decisions: int  # how many answers of this tool it read
    basis: list[Basis] = field(default_factory=list)
    costs: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    ms: float = 0.0
    acts: bool = False  # the host acts on this verdict (see `suggest`)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["probability"] = None if self.probability is None else round(self.probability, 4)
        out["evidence"] = round(self.evidence, 3)
        out["ms"] = round(self.ms, 2)
        return out


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str) and len(value) <= VALUE_CAP:
        return value
    return None


def _fields(arguments: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """The argument fields of a call (paths, two levels deep) and its short scalar values."""
    keys: list[str] = []
    values: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any, depth: int) -> None:
        if len(keys) + len(values) >= MAX_FEATURES:
            return
        if isinstance(value, dict) and depth < 2:
            for key in sorted(value)[:MAX_FEATURES]:
                path = f"{prefix}.{key}" if prefix else str(key)
                keys.append(path)
                walk(path, value[key], depth + 1)
            return
        text = _scalar(value)
        if text is not None and prefix:
            values.append((prefix, text))

    walk("", arguments if isinstance(arguments, dict) else {}, 0)
    return keys, values


def features(arguments: Any, requester: str, free: frozenset[str] = frozenset()) -> frozenset[str]:
    """What a call looks like to the model: who asked, the fields given, and the values of
    the fields that are not `free` (a free field's value differs from call to call, like a
    subject line: it tells nothing, and would make every call look unlike every other)."""
    keys, values = _fields(arguments)
    out = {f"by:{requester}", *(f"k:{k}" for k in keys)}
    out.update(f"v:{path}={text}" for path, text in values if path not in free)
    return frozenset(out)


def free_fields(past: list[tuple[int, str, str, Any]]) -> frozenset[str]:
    """Fields whose values in the history are mostly new each time (more than `FREE_SHARE`
    of their occurrences are distinct values, over `FREE_MIN` occurrences at least)."""
    seen: dict[str, list[str]] = {}
    for _, _, _, arguments in past:
        for path, text in _fields(arguments)[1]:
            seen.setdefault(path, []).append(text)
    return frozenset(
        path for path, texts in seen.items() if len(texts) >= FREE_MIN and len(set(texts)) > FREE_SHARE * len(texts)
    )


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def costs_for(server: str, tool: str, tool_class: str) -> Costs:
    rows = {
        (r.server_name, r.tool_name, r.tool_class): r
        for r in ApprovalCost.objects.filter(server_name__in=["", server], tool_class__in=["", tool_class])
    }
    for key in ((server, tool, ""), (server, "", ""), ("", "", tool_class), ("", "", "")):
        row = rows.get(key)
        if row is not None:
            return Costs(row.wrong_allow, row.wrong_block, row.ask, row.scope, row.act)
    return Costs(*DEFAULT_COSTS.get(tool_class, DEFAULT_COSTS[DESTRUCTIVE]), scope=f"built in ({tool_class})")


def history(tool_name: str, before_id: int | None = None) -> list[tuple[int, str, str, Any]]:
    """The latest answers people gave to calls of `tool_name`: (id, approval, requester, arguments)."""
    answers = Call.objects.filter(tool_name=tool_name).exclude(approval="")
    if before_id is not None:
        answers = answers.filter(pk__lt=before_id)
    rows = answers.order_by("-decided_at").values_list("pk", "approval", "requester_name", "arguments")[:HISTORY]
    return list(rows)


def estimate(call: Call, past: list[tuple[int, str, str, Any]]) -> tuple[float, float, list[Basis]]:
    """(probability of an approval, weight of evidence, the answers weighed, heaviest first)."""
    free = free_fields(past)
    call_features = features(call.arguments, call.requester_name, free)
    approved = total = 0.0
    weighed: list[Basis] = []
    for pk, approval, requester, arguments in past:
        weight = similarity(call_features, features(arguments, requester, free)) ** SHARPNESS
        if weight <= 0:
            continue
        total += weight
        if approval == Call.APPROVED:
            approved += weight
        weighed.append(Basis(pk, approval, round(weight, 3)))
    weighed.sort(key=lambda b: (-b.weight, -b.call_id))
    return (1 + approved) / (2 + total), total, weighed


def _predict(call: Call, costs: Costs) -> Suggestion:
    past = history(call.tool_name, before_id=call.pk)
    p, evidence, weighed = estimate(call, past)
    if evidence < MIN_EVIDENCE:
        verdict = ASK
        reason = f"too little history: {evidence:.1f} of {MIN_EVIDENCE:.0f} needed" if past else "no past answers"
    else:
        verdict = costs.verdict(p)
        reason = f"{len(weighed)} similar answers weigh {evidence:.1f}"
    return Suggestion(verdict, p, evidence, len(past), weighed[:BASIS_SHOWN], reason=reason)


def suggest(call: Call, predictor: Any = None) -> Suggestion:
    """The suggestion for `call` (its tool, arguments and requester; saved or not), failing
    closed: an error, or a prediction over the time limit, says ask."""
    started = time.perf_counter()
    costs = Costs(*DEFAULT_COSTS[DESTRUCTIVE], scope="built in")
    try:
        costs = costs_for(call.server_name, call.tool_name, call.tool_class)
        suggestion = (predictor or _predict)(call, costs)
    except Exception as exc:  # boundary: whatever goes wrong, a person is asked
        logger.exception("the suggestion for a call of %s failed", call.tool_name)
        suggestion = Suggestion(ASK, None, 0.0, 0, reason=f"the prediction failed ({type(exc).__name__}): ask")
    seconds = time.perf_counter() - started
    limit = settings.PATCHBAY_SUGGEST_LIMIT
    if seconds > limit and suggestion.verdict != ASK:
        suggestion.reason = f"the prediction took {seconds * 1000:.0f} ms, over its limit of {limit * 1000:.0f} ms: ask"
        suggestion.verdict = ASK
    suggestion.ms = seconds * 1000
    suggestion.costs = {"wrong_allow": costs.wrong_allow, "wrong_block": costs.wrong_block, "ask": costs.ask}
    suggestion.costs["scope"] = costs.scope
    # Acted on only where an admin opted in, never on "ask", and for a destructive tool only
    # once people have answered enough of its calls.
    enough = call.tool_class != DESTRUCTIVE or suggestion.decisions >= settings.PATCHBAY_AUTO_DECIDE_MIN_ANSWERS
    suggestion.acts = costs.act and suggestion.verdict != ASK and enough
    return suggestion


def shown(call: Call) -> dict[str, Any] | None:
    """What the suggestion said when `call` began to wait, as the CLI and the API show it
    (verdict, probability, basis: the heaviest answers it rests on)."""
    made = call.suggestion
    if not made:
        return None
    basis = [{"call_id": b["call_id"], "approval": b["approval"], "weight": b["weight"]} for b in made.get("basis", [])]
    return {
        "verdict": made["verdict"],
        "probability": made.get("probability"),
        "basis": basis,
        "evidence": made.get("evidence"),
        "reason": made.get("reason", ""),
    }


# --- how good they are -------------------------------------------------------------------------

BINS = 10
# Answers of one tool below this are not scored on their own (too few to say anything).
TOOL_MIN = 20
CALIBRATION_WINDOW = 5000


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    predicted: float | None  # the mean probability given
    observed: float | None  # the share approved


@dataclass(frozen=True)
class Calibration:
    count: int
    brier: float | None  # mean of (p - outcome)^2: 0 is perfect, 0.25 is a coin
    bins: list[Bin]
    tools: list[tuple[str, int, float]]  # (tool, answers, Brier score), for tools with TOOL_MIN or more


def calibration(pairs: list[tuple[str, float, bool]]) -> Calibration:
    """Predicted against observed for `(tool, probability given, approved)` pairs."""
    sums: list[list[float]] = [[0, 0.0, 0.0] for _ in range(BINS)]
    by_tool: dict[str, list[float]] = {}
    squared = 0.0
    for tool, p, approved in pairs:
        outcome = 1.0 if approved else 0.0
        bucket = sums[min(BINS - 1, int(p * BINS))]
        bucket[0] += 1
        bucket[1] += p
        bucket[2] += outcome
        squared += (p - outcome) ** 2
        by_tool.setdefault(tool, []).append((p - outcome) ** 2)
    bins = [
        Bin(i / BINS, (i + 1) / BINS, int(n), total_p / n if n else None, approvals / n if n else None)
        for i, (n, total_p, approvals) in enumerate(sums)
    ]
    tools = sorted(
        ((tool, len(errors), sum(errors) / len(errors)) for tool, errors in by_tool.items() if len(errors) >= TOOL_MIN),
        key=lambda t: (-t[1], t[0]),
    )
    return Calibration(len(pairs), squared / len(pairs) if pairs else None, bins, tools)


def measured() -> Calibration:
    """The calibration of the suggestions made, on the answers people gave afterwards: each
    prediction was made when its call began to wait, before its answer existed, so none is
    scored on an answer it learned from."""
    rows = (
        Call.objects.exclude(approval="")
        .filter(suggestion__isnull=False)
        .order_by("-decided_at")
        .values_list("tool_name", "suggestion", "approval")[:CALIBRATION_WINDOW]
    )
    pairs = [
        (tool, float(made["probability"]), approval == Call.APPROVED)
        for tool, made, approval in rows
        if isinstance(made, dict) and made.get("probability") is not None
    ]
    return calibration(pairs)


def cost_table() -> list[tuple[str, Costs]]:
    """Every scope's costs, as the thresholds page shows them: the rows people set, then the
    built-in costs of each class."""
    rows = [(r.scope, Costs(r.wrong_allow, r.wrong_block, r.ask, r.scope)) for r in ApprovalCost.objects.all()]
    rows += [
        (f"built in: {cls.replace('_', '-')} tools", Costs(*costs, scope=f"built in ({cls})"))
        for cls, costs in DEFAULT_COSTS.items()
    ]
    return rows
