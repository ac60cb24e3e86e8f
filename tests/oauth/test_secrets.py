"""Secrets at rest: encrypted in the database, readable with any configured key, rotatable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from hostapp.catalog.models import Server
from hostapp.core import crypto
from hostapp.mcp.config import ConfigError, parse_entry
from hostapp.oauth.models import AuthorizationFlow, Credential

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-live-0123456789abcdef"

pytestmark = pytest.mark.django_db


def raw(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


def secret_server() -> Server:
    return Server.objects.create(
        name="vault",
        transport=Server.HTTP,
        url="https://vault.example/mcp",
        headers={"X-Api-Key": SECRET},
        oauth_client_id="patchbay",
        oauth_client_secret=SECRET + "-client",
    )


def test_configured_secrets_are_encrypted_in_the_database_and_read_back_whole() -> None:
    stdio = Server.objects.create(name="mail", command="mail-server", env={"API_TOKEN": SECRET})
    http = secret_server()

    for table, column, pk in [
        ("catalog_server", "env", stdio.pk),
        ("catalog_server", "headers", http.pk),
        ("catalog_server", "oauth_client_secret", http.pk),
    ]:
        stored = raw(table, column, pk)
        assert stored.startswith(crypto.PREFIX), (column, stored[:20])
        assert SECRET not in stored and "API_TOKEN" not in stored and "X-Api-Key" not in stored

    assert Server.objects.get(pk=stdio.pk).env == {"API_TOKEN": SECRET}
    fresh = Server.objects.get(pk=http.pk)
    assert fresh.headers == {"X-Api-Key": SECRET}
    assert fresh.oauth_client_secret == SECRET + "-client"
    assert fresh.to_config().headers == {"X-Api-Key": SECRET}


def test_oauth_tokens_registrations_and_codes_are_encrypted_too() -> None:
    server = secret_server()
    credential = Credential.objects.create(
        server=server,
        tokens={"access_token": SECRET, "refresh_token": SECRET + "-r", "token_type": "Bearer"},
        client_info={"client_id": "abc", "client_secret": SECRET + "-dcr"},
    )
    flow = AuthorizationFlow.objects.create(server=server, key="k1", redirect_uri="http://x/cb", code=SECRET + "-code")
    for column in ("tokens", "client_info"):
        assert SECRET not in raw("oauth_credential", column, credential.pk)
    assert SECRET not in raw("oauth_authorizationflow", "code", flow.pk)
    assert Credential.objects.get(pk=credential.pk).tokens["refresh_token"] == SECRET + "-r"
    assert AuthorizationFlow.objects.get(pk=flow.pk).code == SECRET + "-code"


def test_a_value_written_before_encryption_is_read_and_encrypted_by_the_next_write() -> None:
    server = Server.objects.create(name="old", command="x")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE catalog_server SET env = %s WHERE id = %s", ['{"OLD": "clear"}', server.pk])
    server = Server.objects.get(pk=server.pk)
    assert server.env == {"OLD": "clear"}
    server.save()
    assert raw("catalog_server", "env", server.pk).startswith(crypto.PREFIX)


def test_rotating_the_key_re_encrypts_every_secret_without_losing_one(capsys: pytest.CaptureFixture[str]) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(PATCHBAY_ENCRYPTION_KEYS=[old]):
        server = secret_server()
        Credential.objects.create(server=server, tokens={"access_token": SECRET})
        before = raw("catalog_server", "headers", server.pk)
    with override_settings(PATCHBAY_ENCRYPTION_KEYS=[new, old]):
        call_command("mcp", "secrets", "rotate")
        # env ({}), headers, the client secret, the tokens: the registration is empty (None).
        assert "re-encrypted 4 secret value(s)" in capsys.readouterr().out
    after = raw("catalog_server", "headers", server.pk)
    assert after != before
    with override_settings(PATCHBAY_ENCRYPTION_KEYS=[new]):  # the old key is gone
        fresh = Server.objects.get(pk=server.pk)
        assert fresh.headers == {"X-Api-Key": SECRET}
        assert fresh.oauth_client_secret == SECRET + "-client"
        assert Credential.objects.get(server=server).tokens == {"access_token": SECRET}


def test_a_key_that_opens_nothing_is_refused_and_changes_nothing() -> None:
    right, wrong = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(PATCHBAY_ENCRYPTION_KEYS=[right]):
        server = secret_server()
    stored = raw("catalog_server", "headers", server.pk)
    with override_settings(PATCHBAY_ENCRYPTION_KEYS=[wrong]):
        with pytest.raises(crypto.SecretUnreadable, match="cannot be decrypted"):
            Server.objects.get(pk=server.pk)
        with pytest.raises(CommandError, match="nothing changed"):
            call_command("mcp", "secrets", "rotate")
    assert raw("catalog_server", "headers", server.pk) == stored


def test_new_key_prints_a_usable_key(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mcp", "secrets", "new-key")
    key = capsys.readouterr().out.strip()
    Fernet(key.encode())


def test_a_malformed_key_is_a_system_check_error(tmp_path: Path) -> None:
    env = {**os.environ, "PATCHBAY_ENCRYPTION_KEY": "not-a-key", "PATCHBAY_DATA_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "patchbay.E006" in result.stderr and "not a Fernet key" in result.stderr


def test_without_a_key_one_is_generated_once_into_the_data_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PATCHBAY_ENCRYPTION_KEY"}
    env["PATCHBAY_DATA_DIR"] = str(tmp_path)
    code = "from django.conf import settings; print(settings.PATCHBAY_ENCRYPTION_KEYS[0])"
    runs = [
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'hostapp.settings'); django.setup(); {code}",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs[0] == runs[1] == (tmp_path / "encryption_key").read_text().strip()
    assert (tmp_path / "encryption_key").stat().st_mode & 0o777 == 0o600


class TestOAuthInTheServerFormat:
    def test_a_pre_registered_client_round_trips(self) -> None:
        entry = {"url": "https://x.example/mcp", "oauth": {"clientId": "id-1", "clientSecret": "s", "scope": "a b"}}
        config = parse_entry("x", entry)
        assert (config.oauth_client_id, config.oauth_client_secret, config.oauth_scope) == ("id-1", "s", "a b")
        assert config.to_entry() == entry

    @pytest.mark.parametrize(
        ("oauth", "field"),
        [
            ("id", "oauth"),
            ({"clientID": "x"}, "oauth.clientID"),
            ({"clientId": 3}, "oauth.clientId"),
            ({"clientSecret": "s"}, "oauth.clientId"),
        ],
    )
    def test_a_bad_oauth_entry_names_the_field(self, oauth: object, field: str) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_entry("x", {"url": "https://x.example/mcp", "oauth": oauth})
        assert caught.value.field == field

    def test_stdio_servers_take_no_oauth(self) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_entry("x", {"command": "x", "oauth": {"clientId": "a"}})
        assert caught.value.field == "oauth"


def test_export_masks_the_client_secret_and_an_import_of_the_mask_keeps_it() -> None:
    from hostapp.catalog import actions

    document = {
        "mcpServers": {
            "vault": {
                "url": "https://vault.example/mcp",
                "headers": {"X-Api-Key": SECRET},
                "oauth": {"clientId": "patchbay", "clientSecret": SECRET + "-client", "scope": "read"},
            }
        }
    }
    actions.import_servers(document)
    exported = actions.export_servers()
    assert SECRET not in str(exported)
    assert exported["mcpServers"]["vault"]["oauth"] == {
        "clientId": "patchbay",
        "clientSecret": "********",
        "scope": "read",
    }

    assert actions.import_servers(exported).unchanged == ["vault"]  # the masks keep what is stored
    assert Server.objects.get(name="vault").oauth_client_secret == SECRET + "-client"
    assert actions.export_servers(include_secrets=True) == document

    with pytest.raises(ConfigError) as caught:
        actions.import_servers({"mcpServers": {"other": exported["mcpServers"]["vault"]}})
    assert caught.value.field == "headers"


def test_the_server_form_takes_a_pre_registered_client_and_keeps_its_secret_masked(admin_client: Any) -> None:
    fields = {"name": "tracker", "transport": "http", "url": "https://tracker.example/mcp", "enabled": "on"}
    fields |= {"oauth_client_id": "patchbay", "oauth_client_secret": SECRET, "oauth_scope": "issues:read"}
    assert admin_client.post("/servers/add/", fields).status_code == 302
    server = Server.objects.get(name="tracker")
    assert (server.oauth_client_id, server.oauth_client_secret, server.oauth_scope) == (
        "patchbay",
        SECRET,
        "issues:read",
    )

    page = admin_client.get("/servers/tracker/").content.decode()
    assert SECRET not in page and "********" in page
    edit = {k: v for k, v in fields.items() if k != "name"} | {"oauth_client_secret": "********", "oauth_scope": "a b"}
    assert admin_client.post("/servers/tracker/", edit).status_code == 302
    server.refresh_from_db()
    assert server.oauth_client_secret == SECRET and server.oauth_scope == "a b"

    stdio = {"name": "local", "transport": "stdio", "command": "x", "oauth_client_id": "patchbay", "enabled": "on"}
    response = admin_client.post("/servers/add/", stdio)
    assert response.status_code == 200 and "only HTTP servers take OAuth settings" in response.content.decode()
