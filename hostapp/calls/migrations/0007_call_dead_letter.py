from django.db import migrations, models


def dead_letters_of_their_own(apps, schema_editor):
    """Calls whose delivery is a dead letter were `failed`; they now say `dead`."""
    Call = apps.get_model("calls", "Call")
    Call.objects.filter(status="failed", action__status="dead").update(status="dead")


def back_to_failed(apps, schema_editor):
    Call = apps.get_model("calls", "Call")
    Call.objects.filter(status="dead").update(status="failed")


class Migration(migrations.Migration):
    dependencies = [
        ("calls", "0006_call_submit_key"),
        ("outbox", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="call",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting", "waiting for approval"),
                    ("queued", "queued"),
                    ("running", "running"),
                    ("succeeded", "succeeded"),
                    ("failed", "failed"),
                    ("dead", "dead letter"),
                    ("unknown", "outcome unknown"),
                    ("denied", "denied"),
                    ("expired", "expired"),
                    ("blocked", "blocked"),
                ],
                max_length=10,
            ),
        ),
        migrations.RunPython(dead_letters_of_their_own, back_to_failed),
    ]
