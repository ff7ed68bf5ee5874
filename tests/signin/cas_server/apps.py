"""The test CAS server's directory: what the campus knows of each person besides the
Django user (the department)."""

from __future__ import annotations

from django.apps import AppConfig


class DirectoryConfig(AppConfig):
    name = "tests.signin.cas_server"
    label = "campus_directory"
    default_auto_field = "django.db.models.AutoField"
