"""The test CAS server's own directory table (created by ``migrate --run-syncdb``)."""

from __future__ import annotations

from typing import ClassVar

from django.contrib.auth.models import User
from django.db import models


class DirectoryEntry(models.Model):
    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="directory")
    department = models.CharField(max_length=100, blank=True)

    objects: ClassVar[models.Manager[DirectoryEntry]] = models.Manager()

    def __str__(self) -> str:
        return self.department
