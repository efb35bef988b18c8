from django.apps import AppConfig


class InferenceConfig(AppConfig):
    """The serving layer. ready() starts nothing (the engine starts from asgi.py only): it warns of
    settings an old .env may still set that are no longer read."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "inference"
    verbose_name = "Inference"

    def ready(self):
        from minivllm_site.removed_settings import warn_removed_settings

        warn_removed_settings()
