"""Server env and headers move to encrypted text columns; existing values are re-encrypted."""

from django.db import migrations

import hostapp.core.crypto


def encrypt_existing(apps, schema_editor):  # type: ignore[no-untyped-def]
    Server = apps.get_model("catalog", "Server")
    for server in Server.objects.all():
        # Reading accepts the clear JSON the column held before; saving encrypts it.
        server.save(update_fields=["env", "headers"])


class Migration(migrations.Migration):
    dependencies = [("catalog", "0003_server_last_refresh_at_server_refresh_requested_at")]

    operations = [
        migrations.AlterField(
            model_name="server",
            name="env",
            field=hostapp.core.crypto.EncryptedJSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="server",
            name="headers",
            field=hostapp.core.crypto.EncryptedJSONField(blank=True, default=dict),
        ),
        migrations.RunPython(encrypt_existing, migrations.RunPython.noop),
    ]
