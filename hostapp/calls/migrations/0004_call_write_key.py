"""A key on the rows the ledger writer writes behind an answer (null on every other row), so
that a batch retried after its commit went through, but the connection was lost before the
writer heard so, does not write its calls twice."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("calls", "0003_call_times_given"),
    ]

    operations = [
        migrations.AddField(
            model_name="call",
            name="write_key",
            field=models.UUIDField(blank=True, editable=False, null=True, unique=True),
        ),
    ]
