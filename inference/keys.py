"""API keys as the history keeps them: a key is made here, shown once, and stored only as its
SHA-256 digest and the first characters the admin lists. The admin (which issues keys) and the
API's auth (which checks them) both build on this, not on each other."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "mvk-"
PREFIX_CHARS = 12  # what the admin shows of a key: "mvk-" + 8 characters


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)
