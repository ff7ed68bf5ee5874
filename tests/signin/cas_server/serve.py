"""Run the test CAS server: ``python -m tests.signin.cas_server.serve PORT``.

Creates its SQLite database under ``$CAS_TEST_DIR``, loads ``$CAS_TEST_DIR/seed.json`` (its
users and the services it serves, see :mod:`tests.signin.cas_server.process`) and serves
HTTP on 127.0.0.1:PORT until it is stopped.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.signin.cas_server.settings")
django.setup()

from cas_server.models import ReplaceAttributName, ServicePattern  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tests.signin.cas_server.models import DirectoryEntry  # noqa: E402


def seed(spec: dict) -> None:
    for person in spec["users"]:
        user = User.objects.create_user(
            person["username"],
            password=person["password"],
            email=person.get("email", ""),
            first_name=person.get("first_name", ""),
            last_name=person.get("last_name", ""),
        )
        for name in person.get("groups", []):
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        DirectoryEntry.objects.create(user=user, department=person.get("department", ""))
    for position, service in enumerate(spec["services"]):
        pattern = ServicePattern.objects.create(
            pos=position,
            name=service["name"],
            pattern=service["pattern"],
            single_log_out=service.get("single_log_out", False),
        )
        for name, released_as in service["attributes"].items():
            ReplaceAttributName.objects.create(
                service_pattern=pattern, name=name, replace=released_as
            )


def main(port: str) -> None:
    call_command("migrate", run_syncdb=True, verbosity=0)
    seed(json.loads((Path(os.environ["CAS_TEST_DIR"]) / "seed.json").read_text()))
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main(sys.argv[1])
