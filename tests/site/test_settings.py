"""Settings come from the environment: DATABASE_URL, the serving knobs."""
from minivllm_site import settings as site_settings


def test_sqlite_by_default(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db = site_settings._database()
    assert db["ENGINE"] == "django.db.backends.sqlite3"


def test_database_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@127.0.0.1:5432/minivllm")
    db = site_settings._database()
    assert db["ENGINE"] == "django.db.backends.postgresql" and db["NAME"] == "minivllm" and db["PORT"] == 5432


def test_in_memory_channel_layer_and_queue_bound_defaults():
    assert site_settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert site_settings.MINIVLLM_MAX_QUEUE >= 1
