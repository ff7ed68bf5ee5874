"""Two Celery beats on one Redis: one sends the periodic tasks, the other stands by and
takes over when the first dies (portal.server.beat.LockedScheduler)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from .stack import ROOT, wait_for

pytestmark = [pytest.mark.integration]

SENT = "Sending due task scheduling-cycle"


def start_beat(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    env = {
        **os.environ,
        "DESKPOOL_VAR_DIR": str(tmp_path / "var"),
        "DESKPOOL_SCHEDULER_BEAT_SECONDS": "1",
        "DESKPOOL_BEAT_LOCK_S": "3",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"]
    argv += ["--schedule", str(tmp_path / f"{name}-schedule")]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return process, log


def sent(log: Path) -> int:
    return log.read_text().count(SENT)


def test_a_second_beat_sends_nothing_until_the_first_dies(tmp_path):
    if settings.EMBEDDED:
        pytest.skip("the beat lock is tested on the real Redis: set REDIS_URL")
    first, first_log = start_beat(tmp_path, "beat-1")
    try:
        wait_for(lambda: sent(first_log) >= 2, 30, "the first beat sending")
        second, second_log = start_beat(tmp_path, "beat-2")
        try:
            wait_for(lambda: "standing by" in second_log.read_text(), 30, "the second beat")
            before = sent(first_log)
            time.sleep(4)  # four periods of the cycle entry
            assert sent(first_log) > before  # the first one goes on sending...
            assert sent(second_log) == 0  # ...and the second sends nothing

            os.killpg(first.pid, signal.SIGKILL)  # dies without releasing the lock
            first.wait(10)
            wait_for(lambda: sent(second_log) >= 2, 30, "the second beat taking over")
            assert "holding deskpool:beat:lock" in second_log.read_text()
        finally:
            os.killpg(second.pid, signal.SIGTERM)
            second.wait(20)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGTERM)
            first.wait(20)
