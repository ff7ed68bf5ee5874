"""The admin console: admins only; everyone else gets 404, signed in or not."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduling.models import Node

pytestmark = pytest.mark.django_db


def test_the_console_is_for_admins_only(owner, admin_user):
    assert Client().get("/console/").status_code == 404
    student = Client()
    student.force_login(owner)
    assert student.get("/console/").status_code == 404
    assert "/console/" not in student.get("/").content.decode()
    admin = Client()
    admin.force_login(admin_user)
    Node.objects.create(hostname="gpu-a01")
    page = admin.get("/console/")
    assert page.status_code == 200
    assert "1 node</li>" in page.content.decode()
    assert 'aria-current="page"' in page.content.decode()
    assert 'href="/console/"' in admin.get("/").content.decode()
