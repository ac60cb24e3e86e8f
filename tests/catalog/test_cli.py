"""`manage.py mcp import|export|servers|tools|refresh`."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from hostapp.catalog import actions, cli
from hostapp.catalog.models import SECRET_MASK, Server
from tests.helpers import PYTHON, REPO, clean_env
from tests.mcp.conftest import HOSTILE

from .conftest import listed, make_server, tool_def

SECRET = "tok-1234567890-secret"
DOCUMENT: dict[str, Any] = {
    "mcpServers": {
        "mailbox": {
            "command": "python",
            "args": ["-m", "servers.mailbox", "--data-dir", "/srv/mail"],
            "env": {"API_TOKEN": SECRET},
            "cwd": "/srv/patchbay",
            "trusted": True,
        },
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer abcdefghijklmnop"}},
        "legacy": {"url": "https://old.example.com/sse", "enabled": False},
    }
}


def mcp(*args: str) -> tuple[str, str]:
    """Run `manage.py mcp ARGS` in this process; returns (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("mcp", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(DOCUMENT, indent=2))
    return path


# --- import -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_imports_a_valid_file_and_says_what_it_created(config_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    out, _ = mcp("import", str(config_file))

    assert out == "created: mailbox, remote, legacy\n"
    assert sorted(Server.objects.values_list("name", flat=True)) == ["legacy", "mailbox", "remote"]
    assert Server.objects.get(name="mailbox").env == {"API_TOKEN": SECRET}
    assert SECRET not in caplog.text


@pytest.mark.django_db
def test_it_reports_an_unchanged_reimport(config_file: Path) -> None:
    mcp("import", str(config_file))

    out, _ = mcp("import", str(config_file))

    assert out == "unchanged: mailbox, remote, legacy\n"


@pytest.mark.django_db
def test_it_reads_a_file_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"mcpServers": {"files": {"command": "fs"}}})))

    out, _ = mcp("import", "-")

    assert out == "created: files\n"


@pytest.mark.django_db
def test_it_refuses_a_broken_file_whole_naming_the_entry_and_field(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text(
        json.dumps({"mcpServers": {"good": {"command": "ok"}, "remote": {"url": "ftp://files.example.com/"}}})
    )

    with pytest.raises(CommandError) as caught:
        mcp("import", str(path))

    assert str(caught.value) == ("nothing imported: server 'remote', field 'url': must be an http:// or https:// URL")
    assert Server.objects.count() == 0


@pytest.mark.django_db
def test_it_refuses_a_file_that_is_not_json_with_the_position(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"mcpServers": {\n  "good": {"command": "ok",}\n}}')

    with pytest.raises(CommandError, match=r"broken\.json is not valid JSON: .* at line 2, column"):
        mcp("import", str(path))
    assert Server.objects.count() == 0


@pytest.mark.django_db
def test_it_refuses_a_file_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"cannot read .*missing\.json: No such file or directory"):
        mcp("import", str(tmp_path / "missing.json"))


# --- export -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_exports_with_secrets_masked(config_file: Path) -> None:
    mcp("import", str(config_file))

    out, _ = mcp("export")

    exported = json.loads(out)
    assert exported["mcpServers"]["mailbox"]["env"] == {"API_TOKEN": SECRET_MASK}
    assert exported["mcpServers"]["remote"]["headers"] == {"Authorization": SECRET_MASK}
    assert "tok-1234567890" not in out
    assert "abcdefghijklmnop" not in out


@pytest.mark.django_db
def test_it_round_trips_a_file_through_import_and_export(config_file: Path, tmp_path: Path) -> None:
    mcp("import", str(config_file))
    exported = tmp_path / "exported.json"

    out, _ = mcp("export", "--include-secrets", "-o", str(exported))

    assert out == ""
    assert json.loads(exported.read_text()) == DOCUMENT


@pytest.mark.django_db
def test_it_imports_its_own_masked_export_without_losing_a_secret(config_file: Path, tmp_path: Path) -> None:
    mcp("import", str(config_file))
    masked = tmp_path / "masked.json"
    mcp("export", "-o", str(masked))

    out, _ = mcp("import", str(masked))

    assert out == "unchanged: legacy, mailbox, remote\n"
    assert Server.objects.get(name="mailbox").env == {"API_TOKEN": SECRET}


# --- servers and tools --------------------------------------------------------------------


@pytest.mark.django_db
def test_it_lists_the_servers_as_json() -> None:
    files = listed(make_server("files", trusted=True), tool_def("read"), tool_def("write"))
    actions.mark_refresh_failed(files, "files exited during the handshake (status 2)")
    make_server("remote", transport=Server.HTTP, command="", url="https://mcp.example.com/mcp", enabled=False)

    out, _ = mcp("servers", "--json")

    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["files", "remote"]
    expected_keys = {"name", "transport", "state", "protocol_version", "tool_count", "trusted", "enabled", "last_error"}
    assert expected_keys <= set(rows[0])
    assert rows[0] | {"state": None} == {
        "name": "files",
        "transport": "stdio",
        "state": None,
        "protocol_version": "",
        "tool_count": 2,
        "trusted": True,
        "enabled": True,
        "stale": True,
        "last_error": "files exited during the handshake (status 2)",
        "processes": [],
    }
    assert (rows[1]["transport"], rows[1]["tool_count"], rows[1]["enabled"], rows[1]["last_error"]) == (
        "http",
        0,
        False,
        None,
    )


@pytest.mark.django_db
def test_it_lists_the_servers_as_a_table_with_their_last_error() -> None:
    files = listed(make_server("files"), tool_def("read"))
    actions.mark_refresh_failed(files, "it fell over")

    out, _ = mcp("servers")

    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "TRANSPORT", "STATE", "REVISION", "TOOLS", "TRUSTED", "ENABLED"]
    assert lines[1].split() == ["files", "stdio", "idle", "-", "1", "no", "yes"]
    assert lines[2].strip() == "last error: it fell over"


@pytest.mark.django_db
def test_it_points_to_import_when_no_server_is_configured() -> None:
    out, _ = mcp("servers")

    assert "No servers configured" in out
    assert "mcp import" in out


@pytest.mark.django_db
def test_it_lists_the_tools_as_json_with_claimed_and_applied_annotations() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    listed(
        make_server("files"),
        tool_def("read.file", "Read a file", annotations={"readOnlyHint": True}, title="Read", inputSchema=schema),
    )

    out, _ = mcp("tools", "--json")

    [row] = json.loads(out)
    expected_keys = {
        "name", "server", "original_name", "title", "description", "effective_class", "annotations",
        "input_schema", "status",
    }  # fmt: skip
    assert expected_keys <= set(row)
    assert row["name"] == "files__read_file"
    assert row["server"] == "files"
    assert row["original_name"] == "read.file"
    assert (row["title"], row["description"]) == ("Read", "Read a file")
    assert row["effective_class"] == "destructive"
    assert row["annotations"]["readOnlyHint"] is False
    assert row["annotations"]["destructiveHint"] is True
    assert row["claimed_annotations"] == {"readOnlyHint": True}
    assert row["input_schema"] == schema
    assert row["status"] == "quarantined"


@pytest.mark.django_db
def test_it_filters_the_tools_by_server_and_status() -> None:
    listed(make_server("files", trusted=True), tool_def("read"), tool_def("write"))
    listed(make_server("mail"), tool_def("send"))

    by_server, _ = mcp("tools", "--json", "--server", "files")
    quarantined, _ = mcp("tools", "--json", "--status", "quarantined")
    table, _ = mcp("tools")

    assert [r["name"] for r in json.loads(by_server)] == ["files__read", "files__write"]
    assert [r["name"] for r in json.loads(quarantined)] == ["mail__send"]
    assert "mail__send" in table and "[quarantined: new]" in table


# --- refresh ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_exits_1_for_a_server_that_does_not_exist() -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command("mcp", "refresh", "nope", stdout=io.StringIO(), stderr=err)

    assert caught.value.code == 1
    assert err.getvalue() == "nope: no such server\n"


@pytest.mark.django_db
def test_it_skips_disabled_servers_when_refreshing_all() -> None:
    make_server("off", enabled=False)

    out, err = mcp("refresh")

    assert "off" not in err


def fake_servers(n: int) -> list[Server]:
    return [Server(name=f"s{i}", command="/bin/true") for i in range(n)]


def test_refreshes_run_jobs_at_a_time_and_each_is_reported_as_it_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    inside = threading.Semaphore(0)
    together = threading.Barrier(3, timeout=10)  # three refreshes must be under way at once

    def refresh(server: Server) -> actions.RefreshResult:
        inside.release()
        together.wait()
        if server.name == "s1":
            raise RuntimeError("the database went away")
        return actions.RefreshResult(server.name, ok=True, tools=2)

    monkeypatch.setattr(cli, "refresh_server", refresh)
    monkeypatch.setattr(cli.connection, "close", lambda: None)  # the fake touches no database

    results = {server.name: result for server, result in cli._refresh_each(fake_servers(6), jobs=3)}

    assert sorted(results) == ["s0", "s1", "s2", "s3", "s4", "s5"]
    assert results["s1"].ok is False and results["s1"].error == "RuntimeError: the database went away"
    assert all(results[name].ok for name in results if name != "s1")


def test_with_one_job_the_refreshes_run_in_order_in_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []

    def refresh(server: Server) -> actions.RefreshResult:
        seen.append((server.name, threading.current_thread().name))
        return actions.RefreshResult(server.name, ok=True)

    monkeypatch.setattr(cli, "refresh_server", refresh)

    names = [server.name for server, _ in cli._refresh_each(fake_servers(3), jobs=1)]

    assert names == ["s0", "s1", "s2"]
    assert seen == [(name, threading.current_thread().name) for name in names]


def test_when_the_caller_stops_early_no_more_refreshes_start(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    lock = threading.Lock()
    release = threading.Event()

    def refresh(server: Server) -> actions.RefreshResult:
        with lock:
            started.append(server.name)
        if server.name != "s0":
            release.wait(10)  # under way when the caller stops
        return actions.RefreshResult(server.name, ok=True)

    monkeypatch.setattr(cli, "refresh_server", refresh)
    monkeypatch.setattr(cli.connection, "close", lambda: None)

    each = cli._refresh_each(fake_servers(200), jobs=2)
    assert next(each)[0].name == "s0"
    threading.Timer(0.3, release.set).start()
    each.close()  # what Ctrl-C does to the loop that reports them: waits for those under way

    assert len(started) <= 3


@pytest.mark.parametrize("jobs", ["0", "-2", "many"])
def test_a_jobs_count_that_is_not_a_positive_number_is_refused(jobs: str) -> None:
    with pytest.raises(CommandError, match="not a positive number"):
        call_command("mcp", "refresh", "--jobs", jobs, stdout=io.StringIO(), stderr=io.StringIO())


def _manage(data_dir: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = clean_env(PATCHBAY_DATA_DIR=str(data_dir), DATABASE_URL=None, REDIS_URL=settings.REDIS_URL)
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def _servers_document(flaky_mode: str) -> dict[str, Any]:
    return {
        "mcpServers": {
            "flaky": {"command": PYTHON, "args": [HOSTILE, flaky_mode], "trusted": True},
            "steady": {"command": PYTHON, "args": [HOSTILE, "well"], "env": {"API_TOKEN": SECRET}},
        }
    }


def test_it_keeps_a_failing_servers_last_good_tools_and_exits_1_after_refreshing_the_others(
    tmp_path: Path,
) -> None:
    """Real servers through the real pool, in a process of their own with its own database.

    In this process the pool's event thread would write to SQLite's shared-cache in-memory
    test database while the command does, and its table locks are not retried.
    """
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config = tmp_path / "mcp.json"
    assert _manage(data_dir, "migrate", "-v0").returncode == 0
    config.write_text(json.dumps(_servers_document("well")))
    assert _manage(data_dir, "mcp", "import", str(config)).returncode == 0
    first = _manage(data_dir, "mcp", "refresh", "flaky")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "[1/1] flaky: 5 tools (5 added)\n"

    # The flaky server now crashes on start.
    config.write_text(json.dumps(_servers_document("crash-start")))
    assert _manage(data_dir, "mcp", "import", str(config)).stdout == "updated: flaky\nunchanged: steady\n"
    second = _manage(data_dir, "mcp", "refresh")

    assert second.returncode == 1
    # Both at once (the default), each reported as it finishes.
    assert sorted(re.sub(r"^\[\d/2\] ", "", line) for line in second.stdout.splitlines()) == [
        "flaky: failed",
        "steady: 5 tools (5 added, 5 quarantined)",
    ]
    assert sorted(re.findall(r"^\[(\d)/2\]", second.stdout, re.M)) == ["1", "2"]
    # One line on stderr names the server and why (log lines may come before it).
    assert re.search(r"^flaky: .*exited during the handshake", second.stderr, re.M), second.stderr
    assert SECRET not in first.stdout + first.stderr + second.stdout + second.stderr

    servers = {r["name"]: r for r in json.loads(_manage(data_dir, "mcp", "servers", "--json").stdout)}
    assert (servers["flaky"]["stale"], servers["flaky"]["tool_count"]) == (True, 5)
    assert "exited during the handshake" in servers["flaky"]["last_error"]
    assert (servers["steady"]["stale"], servers["steady"]["tool_count"]) == (False, 5)
