"""Django settings for mini-vLLM.

Every knob comes from an environment variable (see README.md). Defaults run the server on one
machine with no external services: SQLite and the in-memory channel layer.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = env_str("MINIVLLM_SECRET_KEY", "insecure-dev-key-set-MINIVLLM_SECRET_KEY-in-production")
DEBUG = env_bool("MINIVLLM_DEBUG", False)
ALLOWED_HOSTS = env_list("MINIVLLM_ALLOWED_HOSTS", ["*"])
CSRF_TRUSTED_ORIGINS = env_list("MINIVLLM_CSRF_TRUSTED_ORIGINS", [])

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
    """DATABASE_URL when set (e.g. postgres://...), else SQLite in WAL mode for cheap commits."""
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

# The in-memory layer serves one process; set MINIVLLM_REDIS_URL (needs channels_redis) to scale out.
_redis_url = env_str("MINIVLLM_REDIS_URL")
CHANNEL_LAYERS = {
    "default": (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [_redis_url]}}
        if _redis_url
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("MINIVLLM_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Prompts can be long; bodies above this get 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MINIVLLM_MAX_BODY_BYTES", 16 * 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env_int("MINIVLLM_API_PAGE_SIZE", 50),
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "inference.api_errors.drf_exception_handler",
}

# --- mini-vLLM serving knobs (the engine's own MINIVLLM_* variables are read by EngineConfig) ---
# Start the engine when asgi.py is imported by a server process. On by default; under pytest the
# default is off (tests install an engine built from a tiny model), MINIVLLM_AUTOSTART=1 forces it.
MINIVLLM_AUTOSTART = env_bool("MINIVLLM_AUTOSTART", "pytest" not in sys.modules)
# Bound on the engine's waiting queue; requests above it get 429 before anything is queued.
MINIVLLM_MAX_QUEUE = env_int("MINIVLLM_MAX_QUEUE", 64)
# /health reports the loop stalled when it has work but has not stepped for this long.
MINIVLLM_HEALTH_STALL_SECONDS = env_float("MINIVLLM_HEALTH_STALL_SECONDS", 30.0)
# Seconds between pushes on /ws/stats.
MINIVLLM_STATS_INTERVAL = env_float("MINIVLLM_STATS_INTERVAL", 1.0)
# The model id the API reports and accepts (default: the engine's model name).
MINIVLLM_SERVED_MODEL_NAME = env_str("MINIVLLM_SERVED_MODEL_NAME")
# max_new_tokens when a /generate body leaves it out.
MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS = env_int("MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS", 128)
# Seconds a shutdown waits for in-flight requests to record their final state.
MINIVLLM_SHUTDOWN_TIMEOUT = env_float("MINIVLLM_SHUTDOWN_TIMEOUT", 10.0)

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
