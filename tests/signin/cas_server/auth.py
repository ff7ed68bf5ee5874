"""The test CAS server's users: Django's own, with their groups and department released."""

from __future__ import annotations

from cas_server.auth import DjangoAuthUser

from tests.signin.cas_server.models import DirectoryEntry


class CampusAuthUser(DjangoAuthUser):
    """django-cas-server's Django users (their fields and group names) plus the department
    from the directory table."""

    def attributs(self):
        attributes = super().attributs()
        if self.user is not None:
            entry = DirectoryEntry.objects.filter(user=self.user).first()
            attributes["department"] = entry.department if entry else ""
        return attributes
