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


def test_redis_url_switches_the_channel_layer(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/3")
    layer = site_settings._channel_layers()["default"]
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert layer["CONFIG"]["hosts"][0]["address"] == "redis://127.0.0.1:6379/3"
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.setenv("MINIVLLM_REDIS_URL", "redis://127.0.0.1:6379/4")  # the older name still works
    assert site_settings._channel_layers()["default"]["CONFIG"]["hosts"][0]["address"].endswith("/4")


def test_engine_mode_is_local_or_remote(monkeypatch):
    import pytest

    from inference.engine.env import env_choice

    assert site_settings.MINIVLLM_ENGINE == "local"
    monkeypatch.setenv("MINIVLLM_ENGINE", "Remote")
    assert env_choice("MINIVLLM_ENGINE", "local", ("local", "remote")) == "remote"
    monkeypatch.setenv("MINIVLLM_ENGINE", "cluster")
    with pytest.raises(ValueError, match="MINIVLLM_ENGINE"):
        env_choice("MINIVLLM_ENGINE", "local", ("local", "remote"))
