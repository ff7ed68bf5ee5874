"""Production hardening settings, switched on by environment (docs/security.md
"Production settings"); no Django imports: settings.py applies what :func:`read` returns.

- Behind nginx terminating TLS (``DESKPOOL_BEHIND_TLS_PROXY``): X-Forwarded-Proto marks
  requests secure, cookies are Secure.
- HSTS (``DESKPOOL_HSTS_SECONDS``, ``_INCLUDE_SUBDOMAINS``, ``_PRELOAD``): sent on secure
  requests only (Django's SecurityMiddleware).
- A Content-Security-Policy on every response (django-csp), strict enough to stop injected
  scripts, loose enough for noVNC (its canvas, its data: cursor images; its WebSocket to the
  node's gateway, whose origin the desktop page adds); ``DESKPOOL_CSP_REPORT_ONLY`` sends it
  as report-only while a campus tries it out.
- Referrer and framing: same-origin referrers, no framing.
- Sessions: signed in for ``DESKPOOL_SESSION_HOURS`` (12) at most; SameSite=Lax, HttpOnly,
  and with Secure cookies the ``__Host-`` prefix.
- The secret key (:func:`secret_key`): ``SECRET_KEY`` or ``SECRET_KEY_FILE``; without either,
  a production configuration refuses to start, anything else (the embedded first run, a
  developer's or the tests' local database) uses a random key generated once into
  ``var/secret-key`` (mode 0600).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

SELF, NONE = "'self'", "'none'"


def _origins(values: dict[str, Any]) -> list[str]:
    """The http(s) origins among a settings dict's URLs: the identity providers the browser
    is sent to (the logout form's redirect must be allowed by form-action)."""
    found: set[str] = set()
    for value in values.values():
        if isinstance(value, str) and value.startswith(("https://", "http://")):
            parts = urlsplit(value)
            if parts.netloc:
                found.add(f"{parts.scheme}://{parts.netloc}")
    return sorted(found)


def content_security_policy(idp_origins: list[str]) -> dict[str, Any]:
    return {
        "DIRECTIVES": {
            "default-src": [SELF],
            "script-src": [SELF],
            "style-src": [SELF],
            # style="" attributes (a few layouts, noVNC's own elements); no <style> blocks
            "style-src-attr": ["'unsafe-inline'"],
            "img-src": [SELF, "data:", "blob:"],
            "font-src": [SELF],
            # 'self' covers ws:// and wss:// to this origin (the live updates); the desktop and
            # Files pages add their node's gateway (portal/student/views.py, files.py)
            "connect-src": [SELF],
            "object-src": [NONE],
            "base-uri": [SELF],
            "frame-ancestors": [NONE],
            "form-action": [SELF, *idp_origins],
        }
    }


def read(env: environ.Env, signin_settings: dict[str, Any]) -> dict[str, Any]:
    behind_proxy = env.bool("DESKPOOL_BEHIND_TLS_PROXY", default=False)
    secure_cookies = env.bool("DESKPOOL_SECURE_COOKIES", default=behind_proxy)
    values: dict[str, Any] = {
        "SESSION_COOKIE_SECURE": secure_cookies,
        "CSRF_COOKIE_SECURE": secure_cookies,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        # Signed in at most this long, then sign in again (ASVS 3.3.2: 12 hours at level 2).
        "SESSION_COOKIE_AGE": int(env.float("DESKPOOL_SESSION_HOURS", default=12.0) * 3600),
        "SECURE_HSTS_SECONDS": env.int("DESKPOOL_HSTS_SECONDS", default=0),
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": env.bool(
            "DESKPOOL_HSTS_INCLUDE_SUBDOMAINS", default=False
        ),
        "SECURE_HSTS_PRELOAD": env.bool("DESKPOOL_HSTS_PRELOAD", default=False),
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "SECURE_REFERRER_POLICY": "same-origin",
        "X_FRAME_OPTIONS": "DENY",
    }
    if secure_cookies:
        # Secure, path /, no Domain: the __Host- prefix makes browsers hold them to that.
        values["SESSION_COOKIE_NAME"] = "__Host-sessionid"
        values["CSRF_COOKIE_NAME"] = "__Host-csrftoken"
    if behind_proxy:
        values["SECURE_PROXY_SSL_HEADER"] = ("HTTP_X_FORWARDED_PROTO", "https")
    policy = content_security_policy(_origins(signin_settings))
    if env.bool("DESKPOOL_CSP_REPORT_ONLY", default=False):
        values["CONTENT_SECURITY_POLICY_REPORT_ONLY"] = policy
        values["CONTENT_SECURITY_POLICY"] = None
    else:
        values["CONTENT_SECURITY_POLICY"] = policy
    return values


SECRET_KEY_FILE_NAME = "secret-key"


def is_production(env: environ.Env, database_engine: str, debug: bool) -> bool:
    """A deployment others reach: a shared database (not SQLite), DEBUG off, and served under a
    host name of its own (``ALLOWED_HOSTS``) or behind the TLS proxy, as deploy/ sets it up.
    The embedded first run, a developer's and the tests' local runs are not."""
    if debug or database_engine.endswith("sqlite3"):
        return False
    return bool(env.str("ALLOWED_HOSTS", default="")) or env.bool(
        "DESKPOOL_BEHIND_TLS_PROXY", default=False
    )


def secret_key(given: str, var_dir: Path, *, production: bool) -> str:
    """``given`` (SECRET_KEY or the file SECRET_KEY_FILE names) when there is one; otherwise,
    outside production, the key kept in ``var_dir/secret-key``, generated there once (mode
    0600, written whole before it appears, so processes starting together share one)."""
    if given:
        return given
    if production:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: a production configuration (a PostgreSQL DATABASE_URL, "
            "ALLOWED_HOSTS or DESKPOOL_BEHIND_TLS_PROXY, DEBUG off) needs SECRET_KEY_FILE naming "
            "a file with a long random key (or SECRET_KEY); see docs/security.md."
        )
    path = var_dir / SECRET_KEY_FILE_NAME
    for _attempt in range(50):
        if path.exists():
            key = path.read_text().strip()
            if key:
                return key
        else:
            _write_new_key(path)
            continue
        time.sleep(0.1)  # pragma: no cover - another process is writing it
    raise ImproperlyConfigured(f"{path} is empty: remove it and start again")


def _write_new_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(50) + "\n")
    try:
        os.link(draft, path)  # fails when another process was first: theirs is kept
    except FileExistsError:
        pass
    finally:
        draft.unlink()
