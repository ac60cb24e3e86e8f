"""`manage.py mcp` on a database that is not set up: every subcommand that needs it answers
with one line that says what to do, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hostapp.dashboard.management.commands.mcp import NOT_SET_UP
from tests.helpers import PYTHON, REPO, clean_env

# Every subcommand, with what it needs on its command line (a test below checks the list
# against the command's own).
SUBCOMMANDS = {
    "import": ["import", "{config}"],
    "export": ["export"],
    "servers": ["servers", "--json"],
    "tools": ["tools"],
    "refresh": ["refresh"],
    "call": ["call", "files__read", "--args", "{}"],
    "calls": ["calls"],
    "approve": ["approve", "1"],
    "deny": ["deny", "1", "--reason", "no"],
    "inputs": ["inputs", "--json"],
    "answer": ["answer", "1", "--decline"],
    "outbox": ["outbox", "--dead"],
    "redrive": ["redrive", "1"],
    "discard": ["discard", "1", "--reason", "no"],
    "resolve": ["resolve", "1"],
    "rename": ["rename", "files__read", "read_file"],
    "token": ["token", "create", "bot"],
    "auth": ["auth", "list"],
    "secrets": ["secrets", "rotate"],
}
# Needs no database: it prints a new key.
WITHOUT_DATABASE = [["secrets", "new-key"]]


def _mcp(args: list[str], data_dir: Path, database_url: str | None) -> subprocess.CompletedProcess[str]:
    env = clean_env(PATCHBAY_DATA_DIR=str(data_dir), DATABASE_URL=database_url, REDIS_URL=None)
    return subprocess.run(
        [PYTHON, "manage.py", "mcp", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_list_holds_every_subcommand(tmp_path: Path) -> None:
    run = _mcp(["--help"], tmp_path, None)
    listed = run.stdout.split("positional arguments:")[1].split("options:")[0]
    names = {m.group(1) for line in listed.splitlines() if (m := re.match(r"^    (\S+)", line))}
    assert names == set(SUBCOMMANDS)


@pytest.mark.parametrize("database", ["sqlite-never-migrated", "postgresql-without-the-database"])
def test_every_subcommand_on_a_database_not_set_up_says_so_in_one_line(tmp_path: Path, database: str) -> None:
    if database.startswith("postgresql"):
        if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
            pytest.skip("the PostgreSQL case runs where DATABASE_URL names a PostgreSQL server")
        base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        database_url: str | None = f"{base}/patchbay_never_created"
    else:
        database_url = None
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"files": {"command": "true"}}}))
    runs = [[a.replace("{config}", str(config)) for a in args] for args in SUBCOMMANDS.values()]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda args: (args, _mcp(args, tmp_path, database_url)), runs))

    for args, run in results:
        lines = run.stderr.strip().splitlines()
        assert run.returncode != 0, (args, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr, (args, run.stderr)
        assert len(lines) == 1, (args, run.stderr)
        if database_url is None:
            assert lines[0] == f"CommandError: {NOT_SET_UP}", args
        else:
            assert lines[0].startswith("CommandError: the database cannot be used:"), (args, lines)
            assert "patchbay_never_created" in lines[0], (args, lines)
    assert not (tmp_path / "patchbay.sqlite3").exists() or database_url is None

    for args in WITHOUT_DATABASE:
        assert _mcp(args, tmp_path, database_url).returncode == 0
