"""Start and stop the test CAS server (django-cas-server) in its own process.

No Django import here: the test process has the portal's settings, the server its own
(:mod:`tests.signin.cas_server.settings`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

import requests

from tests.integration.stack import ROOT, free_port

# Stripped from the server's environment: they describe the portal, not the CAS server.
PORTAL_VARIABLES = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "DESKPOOL_VAR_DIR")


class CasServer:
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
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if k not in PORTAL_VARIABLES}
        env.update(
            DJANGO_SETTINGS_MODULE="tests.signin.cas_server.settings",
            CAS_TEST_DIR=str(self.workdir),
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.signin.cas_server.serve", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the CAS server exited early:\n{self.log_tail()}")
            with suppress(OSError), urllib.request.urlopen(self.url + "login", timeout=2):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the CAS server did not answer in {timeout} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

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
