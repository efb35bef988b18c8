from django.apps import AppConfig


class InferenceConfig(AppConfig):
    """The serving layer. Deliberately no ready() hook: the engine starts from asgi.py only."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "inference"
    verbose_name = "Inference"
