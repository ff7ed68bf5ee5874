"""A real Prometheus (Debian's ``prometheus``) scrapes the live portal's /metrics.

The portal runs as the integration stack (daphne and a Celery worker on the real PostgreSQL
and Redis) with its metrics token in a file; Prometheus, started here on 127.0.0.1 with its
database under the test's tmp_path, scrapes it every second with that token (and once more
with a wrong one); PromQL over Prometheus's HTTP API then returns the portal's series.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from scheduling.choices import Purpose, SessionState
from scheduling.models import Session

from ..conftest import give_thesis_grant
from .stack import free_port, wait_for

pytestmark = pytest.mark.integration

PROMETHEUS = Path("/usr/bin/prometheus")
TOKEN = "it-metrics-token-0123456789"


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "metrics-token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def stack_options(token_file) -> dict:
    return {"extra_env": {"DESKPOOL_METRICS_TOKEN_FILE": str(token_file)}}


@pytest.fixture
def prometheus(stack, tmp_path, token_file):
    """Prometheus scraping the stack every second; yields its HTTP API's base URL."""
    if not PROMETHEUS.exists():
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    target = stack.url.removeprefix("http://")

    def job(name: str, credentials: Path) -> dict:
        return {
            "job_name": name,
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": str(credentials)},
            "static_configs": [{"targets": [target]}],
        }

    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [job("deskpool", token_file), job("wrong-token", wrong)],
            }
        )
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url, process), 60, "Prometheus to be ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        print("--- prometheus log ---\n" + (tmp_path / "prometheus.log").read_text()[-4000:])


def _ready(url: str, process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited with {process.returncode}")
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, promql: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_a_real_prometheus_scrapes_the_queue_depth(stack, prometheus, owner, stranger, profile):
    for user in (owner, stranger):
        give_thesis_grant(user)
        Session.objects.create(
            user=user, profile=profile, purpose=Purpose.THESIS, state=SessionState.QUEUED
        )
    Session.objects.create(
        user=owner, profile=profile, purpose=Purpose.HOBBY, state=SessionState.QUEUED
    )

    def thesis_depth_is_two():
        result = query(prometheus, 'deskpool_queue_depth{tier="thesis"}')
        return result if result and result[0]["value"][1] == "2" else None

    [series] = wait_for(thesis_depth_is_two, 60, 'deskpool_queue_depth{tier="thesis"} == 2')
    assert series["metric"] == {
        "__name__": "deskpool_queue_depth",
        "tier": "thesis",
        "job": "deskpool",
        "instance": stack.url.removeprefix("http://"),
    }
    assert query(prometheus, 'deskpool_queue_depth{tier="hobby"}')[0]["value"][1] == "1"
    assert query(prometheus, 'sum(deskpool_sessions{state="QUEUED"})')[0]["value"][1] == "3"
    assert query(prometheus, 'up{job="deskpool"}')[0]["value"][1] == "1"
    # The scrape with a wrong token is refused (403): Prometheus marks that target down.
    down = wait_for(
        lambda: query(prometheus, 'up{job="wrong-token"} == 0'), 30, "the wrong token's scrape"
    )
    assert down[0]["value"][1] == "0"
    assert query(prometheus, 'deskpool_queue_depth{job="wrong-token"}') == []
