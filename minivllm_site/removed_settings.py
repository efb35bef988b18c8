"""Settings the site no longer reads, and what took their place: one warning at start names each
one still set, so an upgrade that kept an old .env does not silently run without it."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("minivllm.site")

REPLACED = {
    "DJANGO_SECRET_KEY": "MINIVLLM_SECRET_KEY (or the key file, MINIVLLM_SECRET_KEY_FILE)",
    "MINIVLLM_REDIS_URL": "REDIS_URL",
    "MINIVLLM_SSL_REDIRECT": "MINIVLLM_HTTPS=1, which always redirects to https",
    "MINIVLLM_HSTS_SECONDS": "MINIVLLM_HTTPS=1, which sends a year of HSTS",
    "MINIVLLM_HSTS_INCLUDE_SUBDOMAINS": "MINIVLLM_HTTPS=1, which always includes subdomains",
    "MINIVLLM_HSTS_PRELOAD": "MINIVLLM_HTTPS=1, which always asks for preload",
    "MINIVLLM_TIME_ZONE": "nothing: times are kept in UTC",
    "MINIVLLM_API_PAGE_SIZE": "nothing: the admin API pages 50 rows",
    "MINIVLLM_STATS_INTERVAL": "nothing: /ws/stats pushes every second",
}


def removed_settings_in(environ=None) -> dict[str, str]:
    """Each removed setting set in `environ` (the process's by default), with what replaced it."""
    environ = os.environ if environ is None else environ
    return {name: replacement for name, replacement in REPLACED.items() if environ.get(name)}


def warn_removed_settings(environ=None) -> None:
    """One warning line for all of them (the apps' ready(): every process, once, after logging is set up)."""
    found = removed_settings_in(environ)
    if found:
        log.warning(
            "settings no longer read, ignored: %s",
            "; ".join(f"{name} (now {replacement})" for name, replacement in found.items()),
        )
