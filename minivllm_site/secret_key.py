"""Django's secret key: MINIVLLM_SECRET_KEY when set, else the one kept in a local file.

The file (`.secret_key` at the repository's top, or MINIVLLM_SECRET_KEY_FILE) is made on first
use, readable by its owner only (mkstemp's mode 600), so `make run`, `manage.py` and `daphne` all
work on a fresh clone with DEBUG off and share one key. Several processes starting at once agree:
the first to link its file into place wins, the others read that key. Web workers on several
hosts must share one key: they need MINIVLLM_SECRET_KEY (docker-compose.yml requires it).
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def secret_key(path: Path) -> str:
    """The key in `path`, created there first if the file does not exist. The key is written to a
    temporary file that is then linked into place, so `path` never exists empty (a process killed
    mid-write leaves only the temporary file)."""
    if path.exists():
        return _read(path)
    key = secrets.token_urlsafe(50)
    try:
        fd, temporary = tempfile.mkstemp(prefix=".secret_key-", dir=path.parent)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
        try:
            os.link(temporary, path)  # fails if another process got there first: its key wins
        except FileExistsError:
            return _read(path)
        finally:
            os.unlink(temporary)
    except OSError as exc:
        raise ImproperlyConfigured(f"no MINIVLLM_SECRET_KEY, and {path} cannot be created to keep one: {exc}") from exc
    return key


def _read(path: Path) -> str:
    for _ in range(50):  # another process created it a moment ago and is writing the key
        key = path.read_text().strip()
        if key:
            return key
        time.sleep(0.01)
    raise ImproperlyConfigured(f"{path} is empty: delete it (a new key is made) or set MINIVLLM_SECRET_KEY")
