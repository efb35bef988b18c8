"""Reads docker-compose.yml the way `docker compose` would need it, for tests (no Docker here).

`!reset` / `!override` (compose's merge tags) load as markers, so the override file parses too.
`local_argv` turns a service's command into the argv the scale-out test runs on this machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


class Reset(list):
    """`!reset`: compose drops the value merged from the base file."""


class _ComposeLoader(yaml.SafeLoader):
    pass


_ComposeLoader.add_constructor("!reset", lambda loader, node: Reset())


def _override(loader, node):
    """`!override`: the value replaces the base file's instead of merging; the value is what we check."""
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_ComposeLoader.add_constructor("!override", _override)


def load(name: str = "docker-compose.yml") -> dict:
    with open(REPO / name) as fh:
        return yaml.load(fh, Loader=_ComposeLoader)


def local_argv(command: list[str], *, port: int | None = None) -> list[str]:
    """The compose command for this venv: `python` -> this interpreter, `daphne` -> `-m daphne`,
    the bind address -> 127.0.0.1, the port -> `port`."""
    argv = list(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "daphne":
        argv[:1] = [sys.executable, "-m", "daphne"]
    for flag, value in (("-b", "127.0.0.1"), ("-p", None if port is None else str(port))):
        if flag in argv and value is not None:
            argv[argv.index(flag) + 1] = value
    return argv
