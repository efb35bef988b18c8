"""Django's secret key: MINIVLLM_SECRET_KEY when set, else the one kept in a local file.

The file (`.secret_key` at the repository's top, or MINIVLLM_SECRET_KEY_FILE) is made on first
use, readable by its owner only, so `make run`, `manage.py` and `daphne` all work on a fresh clone
with DEBUG off and share one key. Several processes starting at once agree: the first to create
the file writes the key, the others read it.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def secret_key(path: Path) -> str:
    """The key in `path`, created there first if the file does not exist."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise ImproperlyConfigured(f"no MINIVLLM_SECRET_KEY, and {path} cannot be created to keep one: {exc}") from exc
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


def _read(path: Path) -> str:
    for _ in range(50):  # another process created it a moment ago and is writing the key
        key = path.read_text().strip()
        if key:
            return key
        time.sleep(0.01)
    raise ImproperlyConfigured(f"{path} is empty: delete it (a new key is made) or set MINIVLLM_SECRET_KEY")
