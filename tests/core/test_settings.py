"""Configuration comes from the environment; mistakes are system checks with ids."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO, clean_env


def manage(*args: str, data_dir: Path, **env: str | None) -> subprocess.CompletedProcess[str]:
    environment = clean_env(**{"PATCHBAY_DATA_DIR": str(data_dir), "SECRET_KEY": None, **env})
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=REPO, env=environment, capture_output=True, text=True, timeout=120
    )


def test_zero_config_generates_a_secret_key_once(tmp_path: Path) -> None:
    first = manage(
        "shell", "-v", "0", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", data_dir=tmp_path
    )
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first.stdout.strip() == key_file.read_text().strip()
    assert len(first.stdout.strip()) >= 50
    second = manage(
        "shell", "-v", "0", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", data_dir=tmp_path
    )
    assert second.stdout == first.stdout


def test_defaults_are_sqlite_in_the_data_dir_and_debug_off(tmp_path: Path) -> None:
    code = (
        "from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.DATABASES['default']['NAME'], s.DEBUG, s.REDIS_URL, s.ALLOWED_HOSTS)"
    )
    result = manage("shell", "-v", "0", "-c", code, data_dir=tmp_path, DATABASE_URL=None, REDIS_URL=None, DEBUG=None)
    assert result.returncode == 0, result.stderr
    engine, name, debug, redis_url, hosts = result.stdout.split(" ", 4)
    assert engine == "django.db.backends.sqlite3"
    assert name == str(tmp_path / "patchbay.sqlite3")
    assert debug == "False"
    assert redis_url == f"unix://{tmp_path / 'redis.sock'}"
    assert "127.0.0.1" in hosts


def test_database_url_switches_to_postgresql(tmp_path: Path) -> None:
    code = "from django.conf import settings as s; d = s.DATABASES['default']; print(d['ENGINE'], d['HOST'], d['NAME'])"
    result = manage(
        "shell", "-v", "0", "-c", code, data_dir=tmp_path, DATABASE_URL="postgres://pb@db.example:5432/patchbay"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["django.db.backends.postgresql", "db.example", "patchbay"]


@pytest.mark.parametrize(
    ("env", "check_id", "words"),
    [
        ({"DATABASE_URL": "mysql://u@h/db"}, "patchbay.E011", "unsupported database"),
        ({"DATABASE_URL": "not a url at all"}, "patchbay.E010", "DATABASE_URL"),
        ({"REDIS_URL": "http://localhost:6379"}, "patchbay.E020", "REDIS_URL"),
        ({"PATCHBAY_DEBUG": "maybe"}, "patchbay.E002", "not a boolean"),
        ({"PATCHBAY_LOG_LEVEL": "LOUD"}, "patchbay.E005", "not a level"),
        ({"PATCHBAY_HSTS_SECONDS": "soon"}, "patchbay.E003", "whole number"),
        ({"PATCHBAY_GC_THRESHOLD": "-1"}, "patchbay.E003", "below 0"),
    ],
)
def test_a_misconfiguration_is_a_system_check_not_a_traceback(
    tmp_path: Path, env: dict[str, str], check_id: str, words: str
) -> None:
    result = manage("check", data_dir=tmp_path, **env)
    assert result.returncode != 0
    assert check_id in result.stderr
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unwritable_data_dir_is_a_system_check(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("")
        data_dir = blocker / "sub"  # a path below a regular file can never be created
    else:
        tmp_path.chmod(0o500)
        data_dir = tmp_path / "sub"
    result = manage("check", data_dir=data_dir, SECRET_KEY="given")
    assert result.returncode != 0
    assert "patchbay.E001" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_deploy_warns_about_generated_secrets(tmp_path: Path) -> None:
    result = manage("check", "--deploy", data_dir=tmp_path, REDIS_URL=None)
    assert "patchbay.W001" in result.stderr
    assert "patchbay.W002" in result.stderr
