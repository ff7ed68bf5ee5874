"""A small Django project of the tests' own (the test CAS server, the test OIDC provider)
started in its own process, with its own settings and database: the start, the wait until it
answers, its log, the stop. No Django import here: the test process has the portal's
settings, the server its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

from tests.integration.stack import ROOT

# Stripped from the server's environment: they describe the portal, not the server.
PORTAL_VARIABLES = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "DESKPOOL_VAR_DIR")


class DjangoServer:
    """Subclasses name their ``package`` (holding ``settings`` and ``serve``), the variable
    that tells the server its folder (``dir_variable``), what they are (``what``), and the URL
    that answers once the server is up (``ready_url``); they set ``port`` and ``log``."""

    package = ""
    dir_variable = ""
    what = "the test server"
    port: int
    log: Path
    workdir: Path
    process: subprocess.Popen | None = None

    def ready_url(self) -> str:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if k not in PORTAL_VARIABLES}
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": f"{self.package}.settings",
                self.dir_variable: str(self.workdir),
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
            }
        )
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", f"{self.package}.serve", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited early:\n{self.log_tail()}")
            with suppress(OSError), urllib.request.urlopen(self.ready_url(), timeout=2):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{self.what} did not answer in {timeout} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)

    def stop(self) -> None:
        stop_process(self.process)


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` of a server's log ("" before it has one)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def stop_process(process: subprocess.Popen | None) -> None:
    """SIGTERM, 20 s to go, then SIGKILL; one already gone (or never started) is fine."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
