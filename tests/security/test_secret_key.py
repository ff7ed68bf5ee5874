"""No built-in secret key (issue 25, finding 5d): without SECRET_KEY or SECRET_KEY_FILE the
embedded first run generates a random key once into var/secret-key (0600) and keeps using
it; a production configuration refuses to start instead."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRINT_KEY = "from django.conf import settings; print(settings.SECRET_KEY)"
PRODUCTION = {
    "DATABASE_URL": "postgres://deskpool@db.invalid:5432/deskpool",
    "REDIS_URL": "redis://redis.invalid:6379/0",
    "ALLOWED_HOSTS": "deskpool.example.edu",
}


def settings_in(var: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """Load portal.settings in a process of its own with only ``variables`` set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DESKPOOL_", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"))
        and k not in ("ALLOWED_HOSTS", "DEBUG")
    }
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", DESKPOOL_VAR_DIR=str(var), **variables)
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {PRINT_KEY}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_embedded_first_run_generates_a_key_once_into_var(tmp_path):
    first = settings_in(tmp_path / "var")
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "var" / "secret-key"
    key = first.stdout.strip()
    assert key == key_file.read_text().strip()
    assert len(key) >= 50 and "default" not in key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = settings_in(tmp_path / "var")
    assert again.stdout.strip() == key  # kept, not generated again
    elsewhere = settings_in(tmp_path / "other")
    assert elsewhere.stdout.strip() != key  # random, not built in


def test_a_production_configuration_without_a_key_refuses_to_start(tmp_path):
    refused = settings_in(tmp_path / "var", **PRODUCTION)
    assert refused.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set" in refused.stderr
    assert "SECRET_KEY_FILE" in refused.stderr
    assert not (tmp_path / "var" / "secret-key").exists()


@pytest.mark.parametrize("extra", [{"DESKPOOL_BEHIND_TLS_PROXY": "1", "ALLOWED_HOSTS": ""}])
def test_behind_the_tls_proxy_is_production_too(tmp_path, extra):
    refused = settings_in(tmp_path / "var", **{**PRODUCTION, **extra})
    assert refused.returncode != 0
    assert "SECRET_KEY is not set" in refused.stderr


def test_a_production_configuration_reads_the_key_file_it_is_given(tmp_path):
    key_file = tmp_path / "secret-key"
    key_file.write_text("a-long-random-key-from-the-operator\n")
    started = settings_in(tmp_path / "var", SECRET_KEY_FILE=str(key_file), **PRODUCTION)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "a-long-random-key-from-the-operator"
