"""A call's and an event's time default to now instead of being stamped at insert, so that a
row written after the fact (the ledger writer's) can carry the call's own times. The columns
are the same (a NOT NULL datetime, no database default): only Django's state changes, and no
table is rebuilt."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("calls", "0002_call_requester_agent"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="call",
                    name="created_at",
                    field=models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False),
                ),
                migrations.AlterField(
                    model_name="callevent",
                    name="at",
                    field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
            database_operations=[],
        ),
    ]
