"""Settings come from the environment: DATABASE_URL, the serving knobs; what is fixed stays fixed."""

import json
import os
import subprocess
import sys

from minivllm_site import settings as site_settings
from tests.support.daphne_server import REPO


def settings_under(**env: str) -> dict:
    """minivllm_site/settings.py imported afresh in a subprocess under `env` (and none of this
    session's MINIVLLM_* variables): the values it computes at import."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MINIVLLM_") and k not in ("REDIS_URL", "DATABASE_URL")}
    code = (
        "import json; from minivllm_site import settings as s; r = s.REST_FRAMEWORK; print(json.dumps({"
        "'time_zone': s.TIME_ZONE, 'page_size': r['PAGE_SIZE'], 'stats_interval': s.MINIVLLM_STATS_INTERVAL, "
        "'ssl_redirect': getattr(s, 'SECURE_SSL_REDIRECT', None), 'hsts': getattr(s, 'SECURE_HSTS_SECONDS', None), "
        "'subdomains': getattr(s, 'SECURE_HSTS_INCLUDE_SUBDOMAINS', None), 'preload': getattr(s, 'SECURE_HSTS_PRELOAD', None), "
        "'secure_cookies': getattr(s, 'SESSION_COOKIE_SECURE', False) and getattr(s, 'CSRF_COOKIE_SECURE', False), "
        "'channel_layer': s.CHANNEL_LAYERS['default']['BACKEND']}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    monkeypatch.setenv("MINIVLLM_REDIS_URL", "redis://127.0.0.1:6379/4")  # the old alias is read no more
    assert site_settings._channel_layers()["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"


def test_engine_mode_is_local_or_remote(monkeypatch):
    import pytest

    from inference.engine.env import env_choice

    assert site_settings.MINIVLLM_ENGINE == "local"
    monkeypatch.setenv("MINIVLLM_ENGINE", "Remote")
    assert env_choice("MINIVLLM_ENGINE", "local", ("local", "remote")) == "remote"
    monkeypatch.setenv("MINIVLLM_ENGINE", "cluster")
    with pytest.raises(ValueError, match="MINIVLLM_ENGINE"):
        env_choice("MINIVLLM_ENGINE", "local", ("local", "remote"))


def test_https_implies_hsts_and_the_redirect():
    plain = settings_under()
    assert plain["ssl_redirect"] is None and plain["hsts"] is None and not plain["secure_cookies"]
    https = settings_under(MINIVLLM_HTTPS="1")
    assert https["ssl_redirect"] is True and https["secure_cookies"]
    assert (https["hsts"], https["subdomains"], https["preload"]) == (31536000, True, True)


def test_removed_variables_change_nothing():
    """Fixed values and HTTPS' implications are no longer read from the environment (issue 43)."""
    fixed = {"time_zone": "UTC", "page_size": 50, "stats_interval": 1.0}
    assert {k: settings_under()[k] for k in fixed} == fixed
    removed = settings_under(
        MINIVLLM_HTTPS="1",
        MINIVLLM_TIME_ZONE="Europe/Paris",
        MINIVLLM_API_PAGE_SIZE="7",
        MINIVLLM_STATS_INTERVAL="0.1",
        MINIVLLM_SSL_REDIRECT="0",
        MINIVLLM_HSTS_SECONDS="0",
        MINIVLLM_HSTS_INCLUDE_SUBDOMAINS="0",
        MINIVLLM_HSTS_PRELOAD="0",
        MINIVLLM_REDIS_URL="redis://127.0.0.1:6379/4",
    )
    assert {k: removed[k] for k in fixed} == fixed
    assert (removed["ssl_redirect"], removed["hsts"], removed["subdomains"], removed["preload"]) == (True, 31536000, True, True)
    assert removed["channel_layer"] == "channels.layers.InMemoryChannelLayer"


def test_a_removed_setting_still_set_gets_one_warning_at_start_naming_its_replacement():
    """`manage.py check` starts the apps as every process does: one warning line lists each removed
    variable an old .env still sets and what replaced it; none when none is set."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MINIVLLM_", "DJANGO_SECRET")) and k != "REDIS_URL"}

    def check(**env: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", "check"], cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    warned = [
        line for line in check(DJANGO_SECRET_KEY="old", MINIVLLM_REDIS_URL="redis://x").splitlines() if "no longer read" in line
    ]
    assert len(warned) == 1
    assert "DJANGO_SECRET_KEY (now MINIVLLM_SECRET_KEY" in warned[0] and "MINIVLLM_REDIS_URL (now REDIS_URL)" in warned[0]
    assert "no longer read" not in check()


def test_the_chat_template_setting_is_a_template_or_a_file_and_must_parse(tmp_path):
    """Inline templates longer than a file name may be are taken as they are (a path check of one
    raised ENAMETOOLONG); a file is read; a missing file or a broken template stops the start."""
    import pytest

    inline = "{% for m in messages %}{{ m.content }}{% endfor %}" + " " * 300
    assert site_settings._chat_template(inline) == inline
    file = tmp_path / "chat.jinja"
    file.write_text("{{ messages[0].content }}")
    assert site_settings._chat_template(str(file)) == "{{ messages[0].content }}"
    with pytest.raises(ValueError, match="neither a Jinja template nor a readable file"):
        site_settings._chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="does not parse"):
        site_settings._chat_template("{% for %}")
