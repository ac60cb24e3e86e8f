"""`manage.py check --deploy` under the production settings of the README is clean.

The environment is the README's "Production with docker compose" section: a generated
SECRET_KEY, PostgreSQL and Redis by URL, one host name, its HTTPS origin, PATCHBAY_SECURE=1.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO, clean_env


def production_env(data_dir: Path, **overrides: str | None) -> dict[str, str]:
    env = {
        "PATCHBAY_DATA_DIR": str(data_dir),
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://u:p@db/x",
        "REDIS_URL": "redis://redis:6379/0",
        "ALLOWED_HOSTS": "patchbay.example.com",
        "CSRF_TRUSTED_ORIGINS": "https://patchbay.example.com",
        "PATCHBAY_SECURE": "1",
        "PATCHBAY_DEBUG": None,
        "DEBUG": None,
        "PATCHBAY_HSTS_SECONDS": None,
        "PATCHBAY_SSL_REDIRECT": None,
    }
    env.update(overrides)
    return clean_env(**env)


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """`check --deploy` under the production settings and, as a control, without PATCHBAY_SECURE
    and SECRET_KEY: (exit code, output) of each, run side by side."""
    envs = {
        "production": production_env(tmp_path_factory.mktemp("prod")),
        "defaults": production_env(tmp_path_factory.mktemp("defaults"), PATCHBAY_SECURE=None, SECRET_KEY=None),
    }
    assert len(envs["production"]["SECRET_KEY"]) >= 50
    procs = {
        name: subprocess.Popen(
            [PYTHON, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, env in envs.items()
    }
    results = {}
    for name, proc in procs.items():
        output, _ = proc.communicate(timeout=120)
        results[name] = (proc.returncode, output)
    return results


def test_check_deploy_is_clean_under_the_production_settings(checks: dict[str, tuple[int, str]]) -> None:
    code, output = checks["production"]
    assert code == 0, output
    assert "System check identified no issues" in output, output


def test_check_deploy_does_complain_without_them(checks: dict[str, tuple[int, str]]) -> None:
    """The control: the same command fails on the zero-config defaults, so the test above means something."""
    code, output = checks["defaults"]
    assert code != 0
    for check_id in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check_id in output, output
