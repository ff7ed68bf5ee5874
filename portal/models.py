"""People-facing records: courses and who is enrolled in them."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Course(models.Model):
    """A class taught with pool desktops; coursework requests name one."""

    code = models.SlugField(max_length=40, unique=True)
    title = models.CharField(max_length=200)
    department = models.CharField(max_length=100, blank=True)
    instructors = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="courses_taught", blank=True
    )
    students = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="courses_enrolled", blank=True
    )

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class Member(models.Model):
    """What the portal knows about a person beyond the login: their department."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, related_name="member", on_delete=models.CASCADE
    )
    department = models.CharField(max_length=100, blank=True)

    def __str__(self) -> str:
        return f"{self.user} ({self.department or 'no department'})"
