"""Settings of the test CAS server (django-cas-server): its own SQLite database under
CAS_TEST_DIR, nothing shared with the portal but 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

STATE = Path(os.environ["CAS_TEST_DIR"])

SECRET_KEY = "test-cas-server-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "cas_server",
    "tests.signin.cas_server.apps.DirectoryConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.signin.cas_server.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": STATE / "cas.sqlite3"}}
# Tables straight from the models (migrate --run-syncdb): a start in about a second.
MIGRATION_MODULES = {
    app: None for app in ("auth", "contenttypes", "sessions", "cas_server", "campus_directory")
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only
USE_TZ = True
STATIC_URL = "static/"
# Same host as the portal (127.0.0.1), other port: browsers share cookies across ports, so
# the CAS server's cookies get their own names.
SESSION_COOKIE_NAME = "cas_sessionid"
CSRF_COOKIE_NAME = "cas_csrftoken"
LANGUAGE_COOKIE_NAME = "cas_language"

CAS_AUTH_CLASS = "tests.signin.cas_server.auth.CampusAuthUser"
CAS_NEW_VERSION_HTML_WARNING = False
CAS_NEW_VERSION_EMAIL_WARNING = False
CAS_SHOW_POWERED = False
CAS_INFO_MESSAGES_ORDER: list[str] = []
# Nothing is fetched from the internet (no network in the tests).
CAS_COMPONENT_URLS = {
    name: "data:text/css," if name.endswith("_css") else "data:text/javascript,"
    for name in (
        "bootstrap3_css",
        "bootstrap3_js",
        "html5shiv",
        "respond",
        "bootstrap4_css",
        "bootstrap4_js",
        "jquery",
    )
}
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
