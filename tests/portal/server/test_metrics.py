"""/metrics: the Prometheus text format, read back with prometheus-client's own parser."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal import settings as portal_settings
from scheduling.choices import Purpose, SessionState
from scheduling.models import Alert, AlertRule, Allocation, Gpu, Node, Session, Slice
from scheduling.services import metrics as metrics_service
from scheduling.services.metrics import observe_cycle_duration, render_metrics

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token"


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(found: dict, family: str, name: str | None = None, **labels: str) -> float:
    """The value of the one sample of ``family`` named ``name`` with exactly these labels."""
    values = [
        s.value for s in found[family].samples if s.name == (name or family) and s.labels == labels
    ]
    assert len(values) == 1, (family, name, labels, found[family].samples)
    return values[0]


@pytest.fixture
def cycle_key(monkeypatch):
    """A Redis key of this test's own, so that no other test's cycles land in it."""
    key = f"deskpool:test:cycle:{uuid.uuid4().hex}"
    monkeypatch.setattr(metrics_service, "CYCLE_HISTOGRAM_KEY", key)
    yield key
    metrics_service._redis().delete(key)


@pytest.fixture
def known_state(pool, owner, stranger, profile, make_user):
    """node-1 heard from 12 s ago, a cordoned node silent for 90 s (over the 60 s heartbeat
    timeout, under the 120 s after which it is lost), sessions in known states."""
    now = timezone.now()
    Node.objects.filter(pk=pool.pk).update(last_heartbeat=now - timedelta(seconds=12))
    Node.objects.create(
        hostname="node-2", cordoned=True, last_heartbeat=now - timedelta(seconds=90)
    )
    Gpu.objects.filter(uuid="GPU-a").update(
        metrics={
            "uuid": "GPU-a",
            "utilization_pct": 40.0,
            "memory_used_mb": 2048,
            "temperature_c": 61.5,
            "power_w": 180.0,
            "power_limit_w": 400.0,
            "ecc_corrected_volatile": 3,
            "xid_errors": [79],
        }
    )

    def session(user, purpose, state, **fields):
        return Session.objects.create(
            user=user, profile=profile, purpose=purpose, state=state, **fields
        )

    session(owner, Purpose.THESIS, SessionState.QUEUED, created_at=now - timedelta(seconds=300))
    session(stranger, Purpose.THESIS, SessionState.QUEUED, created_at=now - timedelta(seconds=30))
    session(stranger, Purpose.HOBBY, SessionState.QUEUED, blocked=True)
    running = session(
        owner,
        Purpose.COURSEWORK,
        SessionState.RUNNING,
        node=pool,
        created_at=now - timedelta(minutes=10),
        started_at=now - timedelta(minutes=10) + timedelta(seconds=45),
    )
    session(
        make_user("cleo"),
        Purpose.HOBBY,
        SessionState.ENDED,
        created_at=now - timedelta(minutes=30),
        started_at=now - timedelta(minutes=30) + timedelta(seconds=200),
    )
    # Started two hours ago: outside the time-to-desktop window.
    session(
        owner,
        Purpose.HOBBY,
        SessionState.ENDED,
        created_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=2) + timedelta(seconds=20),
    )
    held = Slice.objects.filter(gpu__uuid="GPU-a").order_by("slot").first()
    assert held is not None
    Allocation.objects.create(session=running, node=pool, slice=held)
    # The pool's level is the "Pool usage" rule's open alert; its thresholds are the rule's.
    usage = AlertRule.objects.create(
        name="Pool usage", metric="pool_usage", scope="pool", warning=70, critical=85
    )
    Alert.objects.create(rule=usage, subject="pool", level="warning", value=72)
    rule = AlertRule.objects.create(
        name="metrics test: GPU temperature", metric="gpu_temperature", scope="gpu", warning=80
    )
    Alert.objects.create(rule=rule, subject="gpu:GPU-a", level="warning", value=81)
    Alert.objects.create(
        rule=rule, subject="gpu:GPU-b", level="critical", state="acknowledged", value=95
    )
    Alert.objects.create(rule=rule, subject="gpu:GPU-c", level="warning", state="resolved")
    return now, held


def test_metrics_read_back_the_database(known_state, cycle_key):
    now, held = known_state
    observe_cycle_duration(0.03)
    observe_cycle_duration(2.0)

    found = families(render_metrics(now).decode())

    # Sessions by state: every state present, zeros included.
    assert sample(found, "deskpool_sessions", state="QUEUED") == 3
    assert sample(found, "deskpool_sessions", state="RUNNING") == 1
    assert sample(found, "deskpool_sessions", state="ENDED") == 2
    assert sample(found, "deskpool_sessions", state="LOST") == 0
    # The queue by tier.
    assert sample(found, "deskpool_queue_depth", tier="thesis") == 2
    assert sample(found, "deskpool_queue_depth", tier="coursework") == 0
    assert sample(found, "deskpool_queue_depth", tier="hobby") == 1
    assert sample(found, "deskpool_queue_blocked", tier="hobby") == 1
    assert sample(found, "deskpool_queue_oldest_wait_seconds", tier="thesis") == 300
    # Time to desktop over the last hour: 45 s and 200 s (the 20 s start is too old).
    ttd = "deskpool_time_to_desktop_seconds"
    assert found[ttd].type == "histogram"
    assert sample(found, ttd, f"{ttd}_bucket", le="30.0") == 0
    assert sample(found, ttd, f"{ttd}_bucket", le="60.0") == 1
    assert sample(found, ttd, f"{ttd}_bucket", le="300.0") == 2
    assert sample(found, ttd, f"{ttd}_bucket", le="+Inf") == 2
    assert sample(found, f"{ttd}_gsum") == 245
    assert sample(found, f"{ttd}_gcount") == 2
    # Nodes: heartbeat age per node, health counted.
    assert sample(found, "deskpool_node_heartbeat_age_seconds", node="node-1") == 12
    assert sample(found, "deskpool_node_heartbeat_age_seconds", node="node-2") == 90
    assert sample(found, "deskpool_node_cordoned", node="node-2") == 1
    assert sample(found, "deskpool_nodes", health="healthy") == 1
    assert sample(found, "deskpool_nodes", health="late") == 1
    assert sample(found, "deskpool_nodes", health="cordoned") == 0
    # GPUs and slices in use.
    gpu_a = {"node": "node-1", "gpu": "0", "uuid": "GPU-a"}
    assert sample(found, "deskpool_gpus", state="in_use") == 1
    assert sample(found, "deskpool_gpus", state="idle") == 2
    assert sample(found, "deskpool_gpu_slices_held", **gpu_a) == 1
    assert sample(found, "deskpool_slices", kind="mig", state="held") == 1
    assert sample(found, "deskpool_slices", kind="mig", state="free") == 7
    assert sample(found, "deskpool_slices", kind="share", state="free") == 2
    # Telemetry as the agent reported it, in base units; absent where not reported.
    assert sample(found, "deskpool_gpu_temperature_celsius", **gpu_a) == 61.5
    assert sample(found, "deskpool_gpu_power_watts", **gpu_a) == 180
    assert sample(found, "deskpool_gpu_utilisation_ratio", **gpu_a) == 0.4
    assert sample(found, "deskpool_gpu_memory_used_bytes", **gpu_a) == 2048 * 1024 * 1024
    assert sample(found, "deskpool_gpu_memory_total_bytes", **gpu_a) == 81920 * 1024 * 1024
    ecc = "deskpool_gpu_ecc_corrected_errors"
    assert sample(found, ecc, f"{ecc}_total", **gpu_a) == 3
    assert sample(found, "deskpool_gpu_xid_errors", **gpu_a) == 1
    assert [s.labels["uuid"] for s in found["deskpool_gpu_temperature_celsius"].samples] == [
        "GPU-a"
    ]
    # The pool: utilisation is the held slice's part of the pool, the level the rule's alert.
    total = sum(Slice.objects.values_list("milli", flat=True))
    utilisation = sample(found, "deskpool_pool_utilisation_ratio")
    assert utilisation == pytest.approx(held.milli / total)
    assert 0 < utilisation < 1
    assert sample(found, "deskpool_pool_alert_level") == 1
    assert sample(found, "deskpool_pool_alert", level="warn") == 1
    assert sample(found, "deskpool_pool_alert", level="ok") == 0
    assert sample(found, "deskpool_pool_threshold_ratio", level="warn") == pytest.approx(0.7)
    assert sample(found, "deskpool_pool_threshold_ratio", level="block") == pytest.approx(0.85)
    # Open alerts by the rule's metric, level and state (the resolved one is not counted).
    alerts = {"metric": "gpu_temperature"}
    assert sample(found, "deskpool_alerts", **alerts, level="warning", state="firing") == 1
    assert sample(found, "deskpool_alerts", **alerts, level="critical", state="acknowledged") == 1
    assert sample(found, "deskpool_alerts", **alerts, level="warning", state="acknowledged") == 0
    assert (
        sample(found, "deskpool_alerts", metric="pool_usage", level="warning", state="firing") == 1
    )
    assert sum(s.value for s in found["deskpool_alerts"].samples) == 3
    # Cycle durations, from the histogram every process adds to.
    cycle = "deskpool_scheduling_cycle_duration_seconds"
    assert found[cycle].type == "histogram"
    assert sample(found, cycle, f"{cycle}_bucket", le="0.05") == 1
    assert sample(found, cycle, f"{cycle}_bucket", le="2.5") == 2
    assert sample(found, cycle, f"{cycle}_count") == 2
    assert sample(found, cycle, f"{cycle}_sum") == pytest.approx(2.03)


def test_metrics_follow_prometheus_conventions(known_state):
    now, _held = known_state
    found = families(render_metrics(now).decode())
    usernames = {"ada", "ben", "cleo"}
    for name, family in found.items():
        assert name.startswith("deskpool_"), name
        assert "percent" not in name and "_mb" not in name, name
        for s in family.samples:
            assert not {"user", "username", "user_id"} & set(s.labels), s
            assert not usernames & set(s.labels.values()), s
            if s.name.endswith("_ratio"):
                assert 0 <= s.value <= 1, s
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)


@override_settings(METRICS_TOKEN=TOKEN)
def test_metrics_need_the_token_or_an_admin(known_state, admin_user, owner):
    anonymous = Client()
    answer = anonymous.get("/metrics")
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 403
    answer = anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "deskpool_queue_depth" in families(answer.content.decode())

    staff = Client()
    staff.force_login(admin_user)
    assert staff.get("/metrics").status_code == 200
    student = Client()
    student.force_login(owner)
    assert student.get("/metrics").status_code == 403
    # A student with the right token still gets in: the token, not the login, is checked.
    assert student.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


@override_settings(METRICS_TOKEN="")
def test_no_configured_token_lets_no_token_in(db):
    answer = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ")
    assert answer.status_code == 403


def test_the_token_may_come_from_a_file(tmp_path, monkeypatch):
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    monkeypatch.setenv("DESKPOOL_METRICS_TOKEN_FILE", str(secret))
    assert portal_settings._secret("DESKPOOL_METRICS_TOKEN", "") == TOKEN


def test_a_scrape_makes_ten_queries_whatever_the_pool(known_state, django_assert_max_num_queries):
    now, _held = known_state
    with django_assert_max_num_queries(10):
        render_metrics(now)


def test_metrics_path_is_exact(db):
    assert Client().get("/metrics/").status_code == 404
