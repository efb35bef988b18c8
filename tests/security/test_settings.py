"""Production settings: DEBUG off unless asked, the secret key from the environment or a file made
once, hosts and CSRF origins from the environment, and `manage.py check --deploy` clean under them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.daphne_server import REPO

PRODUCTION = {
    "MINIVLLM_SECRET_KEY": "k3y-for-the-deploy-check-only-7a1f0c9e2b8d4f6a3c5e7b9d1f2a4c6e8b0d",
    "MINIVLLM_ALLOWED_HOSTS": "llm.example.com",
    "MINIVLLM_CSRF_TRUSTED_ORIGINS": "https://llm.example.com",
    "MINIVLLM_HTTPS": "1",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MINIVLLM_") and k != "DJANGO_SECRET_KEY"}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_under_production_settings():
    done = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_without_a_key_in_the_environment_one_is_made_once_and_kept(tmp_path):
    path = tmp_path / "secret_key"
    code = "from django.conf import settings; print(settings.DEBUG, settings.SECRET_KEY)"

    def printed(**env) -> list[str]:
        done = manage("shell", "-c", code, MINIVLLM_SECRET_KEY_FILE=str(path), **env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1].split()  # the shell may print a banner first

    debug, key = printed()
    assert debug == "False" and len(key) >= 50 and path.read_text().strip() == key
    assert path.stat().st_mode & 0o777 == 0o600
    assert printed()[1] == key  # kept
    assert printed(MINIVLLM_SECRET_KEY="from-the-env-" + "x" * 40)[1] == "from-the-env-" + "x" * 40  # the environment wins
    assert printed(DJANGO_SECRET_KEY="an-old-alias-" + "y" * 40)[1] == key  # an alias no longer read


def test_an_empty_key_file_is_a_clear_error(tmp_path):
    path = tmp_path / "secret_key"
    path.write_text("")
    done = manage("check", MINIVLLM_SECRET_KEY_FILE=str(path))
    assert done.returncode != 0 and f"{path} is empty" in done.stderr


def test_hosts_and_origins_come_from_the_environment():
    code = "from django.conf import settings as s; print(s.DEBUG, s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, s.SECURE_SSL_REDIRECT)"
    done = manage("shell", "-c", code, **PRODUCTION)
    assert done.stdout.strip().splitlines()[-1] == "False ['llm.example.com'] ['https://llm.example.com'] True", (
        done.stdout + done.stderr
    )


def test_https_alone_turns_on_hsts_and_the_redirect():
    """MINIVLLM_HTTPS=1 implies them; the variables that once tuned them are read no more."""
    code = (
        "from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD)"
    )
    old = {"MINIVLLM_SSL_REDIRECT": "0", "MINIVLLM_HSTS_SECONDS": "60", "MINIVLLM_HSTS_PRELOAD": "0"}
    for env in ({}, old):
        done = manage("shell", "-c", code, **PRODUCTION, **env)
        assert done.stdout.strip().splitlines()[-1] == "True 31536000 True True", done.stdout + done.stderr
