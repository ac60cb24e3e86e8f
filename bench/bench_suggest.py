"""What a suggestion for approvers costs (hostapp/calls/suggest.py), against the call it is
made for.

Run from the repository root (Redis on 127.0.0.1:6379 for the live events; SQLite in a
temporary data directory unless DATABASE_URL names a database)::

    .venv/bin/python bench/bench_suggest.py [--history 0,50,500,2000] [--repeat 200]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_suggest .venv/bin/python bench/bench_suggest.py

For each history size H: H past answers to calls of one destructive tool (approvals and
denials, with a telling field, a free-text one and four requesters), then

* `suggest`: the median time of one suggestion for a call of that tool (it reads at most
  the latest 500 answers: `HISTORY`), split into its read of the history and the estimate;
* `start_call`: the median time of a whole call that waits for approval (the row, its
  event, the live event on commit, and the suggestion made before it is written).

The share `suggest / start_call` is the figure: what the suggestion adds to a waiting call.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def setup_django(data_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "hostapp.settings"
    os.environ["PATCHBAY_DATA_DIR"] = data_dir
    os.environ.setdefault("PATCHBAY_LOG_LEVEL", "WARNING")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", default="0,50,500,2000")
    parser.add_argument("--repeat", type=int, default=200)
    options = parser.parse_args(argv)
    setup_django(tempfile.mkdtemp(prefix="bench-suggest-"))

    from hostapp.calls import actions, suggest
    from hostapp.calls.models import Call
    from hostapp.catalog import actions as catalog_actions
    from hostapp.catalog.models import Server

    Server.objects.filter(name="mail").delete()
    Call.objects.filter(tool_name="mail__send").delete()
    server = Server.objects.create(name="mail", command="/bin/true", trusted=True)
    catalog_actions.record_tools(server, [{"name": "send", "inputSchema": {"type": "object"}}])
    requester = actions.Requester(Call.CLI, "cli")
    rng = random.Random(7)
    made = 0
    print(f"database: {os.environ.get('DATABASE_URL', 'SQLite')}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'history':>8} {'suggest ms':>11} {'read ms':>8} {'estimate ms':>12} {'start_call ms':>14} {'share':>6}")
    for size in (int(n) for n in options.history.split(",")):
        rows = []
        for i in range(made, size):
            bad = rng.random() < 0.3
            rows.append(
                Call(
                    requester_kind=Call.AGENT,
                    requester_name=f"agent-{i % 4}",
                    server_name="mail",
                    tool_name="mail__send",
                    original_name="send",
                    tool_class="destructive",
                    definition_hash="h",
                    arguments={
                        "to": "everyone@corp.example" if bad else f"user{i % 20}@corp.example",
                        "subject": f"s{i}",
                    },
                    argument_digest="d",
                    decision=Call.ASK,
                    status=Call.DENIED if bad else Call.SUCCEEDED,
                    approval=Call.REFUSED_BY_PERSON if bad else Call.APPROVED,
                    decided_at="2026-12-01T10:00:00Z",
                )
            )
        Call.objects.bulk_create(rows, batch_size=500)
        made = max(made, size)
        probe = Call(
            requester_name="agent-1",
            server_name="mail",
            tool_name="mail__send",
            tool_class="destructive",
            arguments={"to": "user3@corp.example", "subject": "hello"},
        )
        whole = median_ms(functools.partial(suggest.suggest, probe), options.repeat)
        past = suggest.history("mail__send")
        read = median_ms(lambda: suggest.history("mail__send"), options.repeat)
        estimate = median_ms(functools.partial(suggest.estimate, probe, past), options.repeat)
        start = median_ms(
            lambda: actions.start_call("mail__send", {"to": "user3@corp.example", "subject": "hi"}, requester),
            max(20, options.repeat // 4),
        )
        Call.objects.filter(status=Call.WAITING).delete()  # not answers: the history stays as it was
        print(f"{size:>8} {whole:>11.2f} {read:>8.2f} {estimate:>12.2f} {start:>14.2f} {whole / start:>6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
