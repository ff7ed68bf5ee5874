"""Start and stop the test CAS server (django-cas-server) in its own process.

No Django import here: the test process has the portal's settings, the server its own
(:mod:`tests.signin.cas_server.settings`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import requests

from tests.integration.stack import free_port
from tests.signin.django_server import DjangoServer


class CasServer(DjangoServer):
    """A django-cas-server on 127.0.0.1 with its own SQLite database under ``workdir``.

    ``users``: dicts of username, password, email, first_name, last_name, groups and
    department. ``services``: dicts of name, pattern (a regular expression for the service
    URLs), attributes (attribute name -> the name it is released under), single_log_out.
    """

    def __init__(self, workdir: Path, users: list[dict], services: list[dict]):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "seed.json").write_text(json.dumps({"users": users, "services": services}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/cas/"
        self.log = workdir / "cas-server.log"
        self.process = None

    package = "tests.signin.cas_server"
    dir_variable = "CAS_TEST_DIR"
    what = "the CAS server"

    def ready_url(self) -> str:
        return self.url + "login"

    def service_ticket(
        self, username: str, password: str, service: str, browser: requests.Session | None = None
    ) -> str:
        """Sign in on the CAS server's login form as a browser would (its login ticket and
        CSRF token, its session cookie, kept in ``browser`` when given) and return the
        service ticket it issues."""
        with requests.Session() as own:
            client = browser or own
            form = client.get(self.url + "login", params={"service": service}, timeout=10)
            fields = dict(re.findall(r'name="(lt|csrfmiddlewaretoken)" value="([^"]+)"', form.text))
            answer = client.post(
                form.url,
                data={**fields, "username": username, "password": password, "service": service},
                headers={"Referer": form.url},
                allow_redirects=False,
                timeout=10,
            )
        location = answer.headers.get("Location", "")
        found = re.search(r"[?&]ticket=([^&]+)", location)
        assert found, f"the CAS server issued no ticket ({answer.status_code}):\n{self.log_tail()}"
        return found.group(1)
