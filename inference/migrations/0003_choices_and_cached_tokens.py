from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inference", "0002_api_keys")]

    operations = [
        migrations.AddField(
            model_name="generationrequest",
            name="choices",
            field=models.JSONField(
                blank=True, default=list, help_text="Every choice: index, text, finish_reason, stop_reason, completion_tokens."
            ),
        ),
        migrations.AddField(
            model_name="generationrequest",
            name="cached_tokens",
            field=models.PositiveIntegerField(default=0, help_text="Prompt tokens served from the prefix cache."),
        ),
        migrations.AlterField(
            model_name="generationrequest",
            name="output_text",
            field=models.TextField(blank=True, help_text="The completion (with n > 1: the first choice's)."),
        ),
        migrations.AlterField(
            model_name="generationrequest",
            name="completion_tokens",
            field=models.PositiveIntegerField(default=0, help_text="Summed over the choices."),
        ),
    ]
