"""docker-compose.yml as `docker compose up --scale web=3 --scale worker=2` reads it.

Docker does not run here: the file is read as Compose resolves it (`docker-compose config`),
and what would stop a service from scaling is looked for: a fixed host port, a fixed
container name. The proxy's own configuration is checked by `haproxy -c` (also in CI).
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.helpers import REPO, clean_env

COMPOSE = shutil.which("docker-compose")
HAPROXY = shutil.which("haproxy")


def _resolved() -> dict[str, Any]:
    if COMPOSE is None:
        pytest.skip("docker-compose is not installed (CI installs Debian's)")
    run = subprocess.run(
        [COMPOSE, "-f", str(REPO / "docker-compose.yml"), "config"],
        env=clean_env(SECRET_KEY="test-only", POSTGRES_PASSWORD="test-only"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    loaded: dict[str, Any] = yaml.safe_load(run.stdout)
    return loaded


def test_web_and_worker_scale_behind_the_proxy_and_beat_is_one() -> None:
    services = _resolved()["services"]
    for name in ("web", "worker"):
        service = services[name]
        assert "container_name" not in service, name
        # A published port would be taken by the first replica: the proxy is the way in.
        assert not service.get("ports"), (name, service.get("ports"))
    proxy = services["proxy"]
    assert proxy["image"].startswith("haproxy:")
    assert [str(port).split(":")[-1] for port in proxy["ports"]] == ["8080/tcp"]
    assert any("deploy/haproxy.cfg" in str(v) for v in proxy["volumes"])
    # Each worker is named after its container; beat sends the schedule under the lock.
    assert "worker@%h" in services["worker"]["command"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "hostapp", "beat"]


def test_the_proxy_configuration_passes_haproxys_own_check() -> None:
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (CI installs Debian's)")
    config = REPO / "deploy" / "haproxy.cfg"
    run = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    text = config.read_text()
    # Sessions stick by the id the initialize answer carries, and the server list follows --scale.
    assert "stick store-response res.hdr(mcp-session-id)" in text
    assert "stick match req.hdr(mcp-session-id)" in text
    assert "server-template web" in text and "resolvers docker" in text
