"""Retention counts from a conversation's last turn (StoredResponse.last_turn). Rows kept before
this start their retention at the upgrade, not at their creation, so an upgrade never purges a
stored conversation by surprise; a warning says how many the creation-time rule would have taken."""

import datetime
import logging

import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

log = logging.getLogger("minivllm.site")


def warn_of_old_rows(apps, schema_editor):
    """(AddField's default already gave every existing row this migration's time as its last turn.)"""
    StoredResponse = apps.get_model("inference", "StoredResponse")
    now = django.utils.timezone.now()
    days = settings.MINIVLLM_RESPONSES_RETENTION_DAYS
    if days and days > 0:
        older = StoredResponse.objects.filter(created__lt=now - datetime.timedelta(days=days)).count()
        if older:
            log.warning(
                "%d stored response(s) are older than MINIVLLM_RESPONSES_RETENTION_DAYS (%d): kept, their retention "
                "counts from this upgrade (they go in %d days unless their conversation continues; 0 keeps them forever)",
                older,
                days,
                days,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0008_ollama_endpoints"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedresponse",
            name="last_turn",
            field=models.DateTimeField(
                db_index=True,
                default=django.utils.timezone.now,
                help_text="When its conversation last grew (a later turn continued it): retention counts from here.",
            ),
        ),
        migrations.RunPython(warn_of_old_rows, migrations.RunPython.noop),
    ]
