"""Django settings for mini-vLLM.

Every knob comes from an environment variable (docs/configuration.md). Defaults run the server on
one machine with no external services: SQLite and the in-memory channel layer.
"""

from __future__ import annotations

import sys
from pathlib import Path

from inference.engine.env import env_bool, env_choice, env_float, env_int, env_list, env_str

from .secret_key import secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("MINIVLLM_DEBUG", False)
# From the environment, else the local file (made on first use): minivllm_site/secret_key.py.
SECRET_KEY = env_str("MINIVLLM_SECRET_KEY") or secret_key(Path(env_str("MINIVLLM_SECRET_KEY_FILE") or BASE_DIR / ".secret_key"))
ALLOWED_HOSTS = env_list("MINIVLLM_ALLOWED_HOSTS", ["*"])
CSRF_TRUSTED_ORIGINS = env_list("MINIVLLM_CSRF_TRUSTED_ORIGINS", [])
LOGIN_URL = "admin:login"  # where the key-or-staff guard sends a browser (the dashboard)

# Behind TLS (MINIVLLM_HTTPS=1): secure cookies, a year of HSTS (subdomains, preload), redirect to
# https (not /health: plain-HTTP health checks stay possible); the proxy says https with X-Forwarded-Proto.
MINIVLLM_HTTPS = env_bool("MINIVLLM_HTTPS", False)
if MINIVLLM_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^health$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "inference",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "minivllm_site.urls"
ASGI_APPLICATION = "minivllm_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict:
    """DATABASE_URL when set (e.g. postgres://...), else SQLite in WAL mode for cheap commits
    (MINIVLLM_SQLITE_PATH, a developer switch: the benchmark's servers keep their own file)."""
    url = env_str("DATABASE_URL")
    if url:
        import dj_database_url

        return dj_database_url.parse(url, conn_max_age=env_int("MINIVLLM_DB_CONN_MAX_AGE", 0))
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": env_str("MINIVLLM_SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
    }


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _channel_layers() -> dict:
    """The in-memory layer serves one process; REDIS_URL puts the layer
    on Redis, which scale-out needs: web processes and `runengine` workers talk through it."""
    url = env_str("REDIS_URL")
    if not url:
        return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # socket_timeout above channels-redis' 5 s blocking pop (redis-py would cut it at 5 s);
    # capacity: a web process's channel carries every engine step's outputs for its streams
    host = {"address": url, "socket_timeout": 30}
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [host], "capacity": 1000}}}


CHANNEL_LAYERS = _channel_layers()

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Bodies above this get 413 (1 MiB holds a prompt far beyond any context length).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MINIVLLM_MAX_BODY_BYTES", 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "inference.api.common.errors.drf_exception_handler",
}

# --- mini-vLLM serving knobs (the engine's own MINIVLLM_* variables are read by EngineConfig) ---
# local: the engine thread runs inside each web process. remote: web processes run no engine and
# send requests to `manage.py runengine` workers over the channel layer (set REDIS_URL).
MINIVLLM_ENGINE = env_choice("MINIVLLM_ENGINE", "local", ("local", "remote"))
# remote mode: an engine silent (no stats heartbeat) this long is dropped and its requests fail.
MINIVLLM_ENGINE_TIMEOUT = env_float("MINIVLLM_ENGINE_TIMEOUT", 5.0)
# remote mode: a request no engine has taken after this long fails.
MINIVLLM_ENGINE_ACCEPT_TIMEOUT = env_float("MINIVLLM_ENGINE_ACCEPT_TIMEOUT", 30.0)
# runengine: the id the worker reports (default host-pid), and a file it touches every heartbeat
# while ready (a container healthcheck reads its age).
MINIVLLM_ENGINE_ID = env_str("MINIVLLM_ENGINE_ID")
MINIVLLM_ENGINE_HEARTBEAT_FILE = env_str("MINIVLLM_ENGINE_HEARTBEAT_FILE")
# Start the engine when asgi.py is imported by a server process. On by default; under pytest the
# default is off (tests install an engine built from a tiny model), MINIVLLM_AUTOSTART=1 forces it.
MINIVLLM_AUTOSTART = env_bool("MINIVLLM_AUTOSTART", "pytest" not in sys.modules)
# Bound on the engine's waiting queue; requests above it get 429 before anything is queued.
MINIVLLM_MAX_QUEUE = env_int("MINIVLLM_MAX_QUEUE", 64)
# /health reports the loop stalled when it has work but has not stepped for this long.
MINIVLLM_HEALTH_STALL_SECONDS = env_float("MINIVLLM_HEALTH_STALL_SECONDS", 30.0)
# Seconds between pushes on /ws/stats: fixed, not read from the environment (tests shorten it).
MINIVLLM_STATS_INTERVAL = 1.0
# The model id the API reports and accepts (default: the engine's model name).
MINIVLLM_SERVED_MODEL_NAME = env_str("MINIVLLM_SERVED_MODEL_NAME")
# Many models (inference/serving/models/): every GGUF file and transformers folder in this folder is
# a model served by its name, loaded when a request names it (beside MINIVLLM_MODEL when both are set).
MINIVLLM_MODELS_DIR = env_str("MINIVLLM_MODELS_DIR")
# At most this many loaded at once: loading one more unloads the least recently used idle one.
MINIVLLM_MODELS_MAX = env_int("MINIVLLM_MODELS_MAX", 4)
# A request naming an unloaded model loads it (off: only POST /models/load does).
MINIVLLM_MODELS_AUTOLOAD = env_bool("MINIVLLM_MODELS_AUTOLOAD", True)


def _keep_alive(value: str) -> float | None:
    from inference.serving.models.keep_alive import parse_keep_alive

    try:
        return parse_keep_alive(value) if value else None
    except ValueError as error:
        raise ValueError(f"MINIVLLM_KEEP_ALIVE: {error}") from None


# How long a model stays loaded once idle (Ollama's keep_alive: 300, 5m, 1h30m; -1 never; 0 at once).
# Unset, the model the server starts with stays loaded and the others idle for 5 minutes.
MINIVLLM_KEEP_ALIVE = _keep_alive(env_str("MINIVLLM_KEEP_ALIVE"))
# The tool-call format replies are read in and forced to (api/common/tool_parsers.py): auto = the chat template's.
TOOL_CALL_PARSERS = ("hermes", "llama3_json", "qwen3_coder", "gemma4")  # api/tool_parsers.PARSERS' names
MINIVLLM_TOOL_CALL_PARSER = env_choice("MINIVLLM_TOOL_CALL_PARSER", "auto", ("auto", *TOOL_CALL_PARSERS))
# tool_choice "auto": a reply that opens a call is constrained from there to a valid call of an
# offered tool (engine/sample/tool_trigger.py); off: the model's raw text, read by the parsers alone.
MINIVLLM_TOOL_CALL_GRAMMAR = env_bool("MINIVLLM_TOOL_CALL_GRAMMAR", True)
REASONING_PARSERS = ("qwen3", "deepseek_r1", "gemma4")  # api/reasoning_parsers.PARSERS' names
# A request's own chat_template runs in transformers' sandboxed Jinja, which bounds what it may
# reach but not the time or memory it may take: refused unless trusted (vLLM's --trust-request-chat-template)
MINIVLLM_TRUST_REQUEST_CHAT_TEMPLATE = env_bool("MINIVLLM_TRUST_REQUEST_CHAT_TEMPLATE", False)
# The chat template for a model whose files carry none (a base GGUF), or in place of theirs: a Jinja
# file's path or the template itself (llama-server's and vLLM's --chat-template)


def _chat_template(value: str) -> str:
    """The template itself where the value holds Jinja tags, else the file it names; checked to
    parse now, so a mistake stops the start instead of failing every chat request."""
    if not value:
        return value
    if "{{" not in value and "{%" not in value:
        try:
            value = Path(value).expanduser().read_text()
        except OSError as error:
            raise ValueError(f"MINIVLLM_CHAT_TEMPLATE is neither a Jinja template nor a readable file: {error}") from None
    import jinja2

    try:
        jinja2.Environment().parse(value)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"MINIVLLM_CHAT_TEMPLATE does not parse as Jinja: {error}") from None
    return value


MINIVLLM_CHAT_TEMPLATE = _chat_template(env_str("MINIVLLM_CHAT_TEMPLATE"))
MINIVLLM_REASONING_PARSER = env_choice("MINIVLLM_REASONING_PARSER", "auto", ("auto", "none", *REASONING_PARSERS))
# max_new_tokens when a /generate body leaves it out.
MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS = env_int("MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS", 128)
# Seconds a shutdown waits for in-flight requests to record their final state.
MINIVLLM_SHUTDOWN_TIMEOUT = env_float("MINIVLLM_SHUTDOWN_TIMEOUT", 10.0)
# Days a stored Responses API response is kept (OpenAI keeps them 30); then it reads as missing and
# the purge (manage.py purge_responses, run hourly by the engine) deletes it. 0: kept forever.
MINIVLLM_RESPONSES_RETENTION_DAYS = env_float("MINIVLLM_RESPONSES_RETENTION_DAYS", 30.0)

# --- access and limits (docs/configuration.md, "Security") ---
# API keys besides the admin's; with any key, the API needs `Authorization: Bearer <key>`.
MINIVLLM_API_KEYS = env_list("MINIVLLM_API_KEYS", [])
# Prompt tokens a request may send (0: the model's context length).
MINIVLLM_MAX_PROMPT_TOKENS = env_int("MINIVLLM_MAX_PROMPT_TOKENS", 0)
# max_tokens a request may ask for (chat without max_tokens gets at most this too).
MINIVLLM_MAX_OUTPUT_TOKENS = env_int("MINIVLLM_MAX_OUTPUT_TOKENS", 4096)
# Stop strings per request, and characters per stop string.
MINIVLLM_MAX_STOP_STRINGS = env_int("MINIVLLM_MAX_STOP_STRINGS", 4)
MINIVLLM_MAX_STOP_LENGTH = env_int("MINIVLLM_MAX_STOP_LENGTH", 256)
# Requests one API key may have in flight in this process (0: no limit); above it, 429.
MINIVLLM_MAX_CONCURRENT_PER_KEY = env_int("MINIVLLM_MAX_CONCURRENT_PER_KEY", 16)
# Test-only: routes POST /_test/fault, which injects engine faults. Never on in production.
MINIVLLM_FAULT_INJECTION = env_bool("MINIVLLM_FAULT_INJECTION", False)

LOG_LEVEL = env_str("MINIVLLM_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "minivllm": {"level": LOG_LEVEL},
        "inference": {"level": LOG_LEVEL},
        "django": {"level": "INFO"},
        "daphne": {"level": "INFO"},
    },
}
