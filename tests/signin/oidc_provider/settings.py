"""Settings of the test OIDC provider (django-oauth-toolkit, OIDC on): its own SQLite database
under OIDC_TEST_DIR, an RSA signing key made at start, nothing shared with the portal but
127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

STATE = Path(os.environ["OIDC_TEST_DIR"])
# The directory the provider vouches for: user name -> claims (see .process).
CAMPUS_DIRECTORY = {
    person["username"]: person for person in json.loads((STATE / "seed.json").read_text())["users"]
}

SECRET_KEY = "test-oidc-provider-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.signin.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
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
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": STATE / "idp.sqlite3"}}
# Tables straight from the models (migrate --run-syncdb): a start in about a second.
MIGRATION_MODULES = {app: None for app in ("auth", "contenttypes", "sessions", "oauth2_provider")}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# Same host as the portal (127.0.0.1), other port: browsers share cookies across ports, so
# the provider's cookies get their own names.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LANGUAGE_COOKIE_NAME = "idp_language"

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": _KEY.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode(),
    "OAUTH2_VALIDATOR_CLASS": "tests.signin.oidc_provider.validator.CampusValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Names and user name",
        "email": "E-mail address",
        "groups": "Campus groups and department",
    },
    "PKCE_REQUIRED": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    # RP-initiated logout (the portal's logout ends this session too), without a prompt when
    # the id_token_hint is the signed-in person's.
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
}
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
