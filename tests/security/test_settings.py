"""Production settings: DEBUG off unless asked, SECRET_KEY required then, hosts and CSRF origins
from the environment, and `manage.py check --deploy` clean under them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.daphne_server import REPO

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


def test_secret_key_required_unless_debug():
    done = manage("check", MINIVLLM_ALLOWED_HOSTS="llm.example.com")
    assert done.returncode != 0 and "MINIVLLM_SECRET_KEY is required" in done.stderr
    assert manage("check", MINIVLLM_DEBUG="1").returncode == 0


def test_hosts_and_origins_come_from_the_environment():
    code = "from django.conf import settings as s; print(s.DEBUG, s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, s.SECURE_SSL_REDIRECT)"
    done = manage("shell", "-c", code, **PRODUCTION)
    assert done.stdout.strip().splitlines()[-1] == "False ['llm.example.com'] ['https://llm.example.com'] True", (
        done.stdout + done.stderr
    )
