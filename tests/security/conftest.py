"""One live server for the security package: the real model, API keys from the environment and
the admin (one of them revoked), a staff user, and small limits so every case is quick."""

from __future__ import annotations

import pytest

from tests.support.daphne_server import LiveServer

ENV_KEY = "env-key-0123456789abcdef0123456789abcdef"
OTHER_ENV_KEY = "env-key-second-fedcba9876543210fedcba98"
STAFF = ("staff", "staff-password-for-tests-only")
LIMITS = {
    "MINIVLLM_MAX_OUTPUT_TOKENS": "64",
    "MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS": "8",
    "MINIVLLM_MAX_PROMPT_TOKENS": "200",
    "MINIVLLM_MAX_STOP_STRINGS": "4",
    "MINIVLLM_MAX_STOP_LENGTH": "256",
    "MINIVLLM_MAX_CONCURRENT_PER_KEY": "2",
    "MINIVLLM_MAX_BODY_BYTES": str(1024 * 1024),
}

_SETUP = """
from django.contrib.auth.models import User
from inference.keys import PREFIX_CHARS, generate_key, hash_key
from inference.models import ApiKey
raws = []
for name, revoked in (("good", False), ("revoked", True)):
    raw = generate_key()
    ApiKey.objects.create(name=name, key_hash=hash_key(raw), prefix=raw[:PREFIX_CHARS], revoked=revoked)
    raws.append(raw)
User.objects.create_user("{user}", password="{password}", is_staff=True)
print(" ".join(raws))
"""


class Keys:
    def __init__(self, db_key: str, revoked_key: str):
        self.env = ENV_KEY
        self.db = db_key
        self.revoked = revoked_key
        self.wrong = "mvk-" + "x" * 43


def create_keys_and_staff(server: LiveServer) -> None:
    output = server.manage("shell", "-c", _SETUP.format(user=STAFF[0], password=STAFF[1]))
    db_key, revoked_key = output.strip().splitlines()[-1].split()
    server.keys = Keys(db_key, revoked_key)


@pytest.fixture(scope="package")
def secured(daphne_server):
    return daphne_server(setup=create_keys_and_staff, MINIVLLM_API_KEYS=f"{ENV_KEY},{OTHER_ENV_KEY}", **LIMITS)


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}
