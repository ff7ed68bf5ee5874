"""Alerts: the hysteresis decision on synthetic series (flapping ones included), the evaluation
on the real database, e-mail through a real SMTP server, acknowledgement and resolution
audited, rule validation, the admin-only API, and their effect on placement."""

from __future__ import annotations

import asyncio
import email
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from portal.celery import app
from portal.live.consumers import UpdatesConsumer
from scheduling import events
from scheduling.choices import AuditKind, SessionState
from scheduling.engine import (
    FreeSlice,
    NodeState,
    QueuedRequest,
    Rack,
    RunningSession,
    Snapshot,
    plan,
)
from scheduling.models import Alert, AlertRule, AlertState, AuditEvent, Gpu, Node, Session
from scheduling.rules.alert_rules import (
    CRITICAL,
    WARNING,
    Event,
    Levels,
    Track,
    resolved_by_hand,
    step,
)
from scheduling.services.alert_changes import (
    check_acknowledge,
    check_resolve,
    do_acknowledge,
    do_resolve,
)
from scheduling.services.alerts import default_rules, evaluate_alerts
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.eligibility import Forbidden
from scheduling.services.sessions import check_submit, do_submit
from scheduling.tasks import run_alert_evaluation

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
MEMORY = Levels(warning=75.0, critical=90.0, recovery=60.0)


def run(series: list[float | None], levels: Levels, every_s: int = 60, track=None):
    """Feed a series one value a minute; the events (with their minute) and the last track."""
    track = track or Track()
    happened = []
    for i, value in enumerate(series):
        outcome = step(track, value, levels, T0 + timedelta(seconds=every_s * i))
        track = outcome.track
        if outcome.event != Event.NONE:
            happened.append((i, outcome.event, outcome.level))
    return happened, track


# -- the decision, without a database --------------------------------------------------------


def test_a_value_hovering_at_the_warning_level_raises_one_alert_not_a_flood():
    flapping = [74, 76, 74, 76, 74.9, 75, 61, 89, 61, 76]
    happened, track = run(flapping, MEMORY)
    assert happened == [(1, Event.RAISED, WARNING)]
    assert track.level == WARNING


def test_only_a_value_below_the_recovery_level_resolves_and_a_new_breach_raises_again():
    happened, _ = run([80, 70, 60, 59.9, 58, 76, 76], MEMORY)
    assert happened == [(0, Event.RAISED, WARNING), (3, Event.RESOLVED, None),
                        (5, Event.RAISED, WARNING)]  # fmt: skip


def test_a_warning_escalates_once_and_never_goes_back_down():
    happened, track = run([76, 91, 95, 80, 91, 76, 59], MEMORY)
    assert happened == [
        (0, Event.RAISED, WARNING),
        (1, Event.ESCALATED, CRITICAL),
        (6, Event.RESOLVED, None),
    ]
    assert track == Track()


def test_a_value_already_critical_raises_a_critical_alert():
    assert run([10, 95], MEMORY)[0] == [(1, Event.RAISED, CRITICAL)]


def test_sustained_for_n_minutes_is_honoured_and_a_dip_restarts_the_clock():
    busy = Levels(warning=95.0, critical=None, recovery=80.0, sustained_s=30 * 60)
    happened, track = run([96.0] * 30, busy)
    assert happened == [] and track.breach_since == T0  # 29 minutes so far
    happened, _ = run([96.0] * 31, busy)
    assert happened == [(30, Event.RAISED, WARNING)]
    dipped = [96.0] * 20 + [94.0] + [96.0] * 30
    assert run(dipped, busy)[0] == []
    happened, _ = run([*dipped, 96.0], busy)
    assert happened == [(51, Event.RAISED, WARNING)]  # 30 minutes after the dip, not before


def test_a_rule_without_a_recovery_level_waits_for_a_person():
    xid = Levels(warning=1.0, critical=None, recovery=None)
    happened, track = run([0, 2, 0, 0, 1, 0], xid)
    assert happened == [(1, Event.RAISED, WARNING)]
    quiet = resolved_by_hand(track)
    happened, track = run([1, 0, 1], xid, track=quiet)
    assert happened == [(2, Event.RAISED, WARNING)]  # re-armed by the report without errors


def test_resolving_by_hand_keeps_quiet_until_the_value_comes_down():
    quiet = resolved_by_hand(Track(level=WARNING))
    happened, _ = run([80, 80, 70, 80, 59, 80], MEMORY, track=quiet)
    assert happened == [(5, Event.RAISED, WARNING)]


def test_a_missing_reading_changes_nothing():
    happened, track = run([80, None, None, 80], MEMORY)
    assert happened == [(0, Event.RAISED, WARNING)] and track.level == WARNING
    assert run([None, None], MEMORY) == ([], Track())


levels_strategy = st.builds(
    lambda w, gap, rec_gap, sustain: Levels(w, w + gap, w - rec_gap, sustain * 60.0),
    st.floats(10, 90),
    st.floats(1, 20),
    st.floats(0.5, 9.5),
    st.integers(0, 5),
)


@settings(max_examples=300, deadline=None)
@given(levels=levels_strategy, series=st.lists(st.none() | st.floats(0, 120), max_size=60))
def test_any_series_alternates_raise_and_resolve_each_at_its_own_level(levels, series):
    happened, _ = run(series, levels)
    open_ = False
    went_below_recovery = True
    for minute, event, _level in happened:
        value = series[minute]
        assert value is not None
        if event == Event.RAISED:
            assert not open_ and value >= levels.raise_at and went_below_recovery
            open_, went_below_recovery = True, False
        elif event == Event.RESOLVED:
            assert open_ and value < levels.recovery
            open_, went_below_recovery = False, True
        else:
            assert open_ and event == Event.ESCALATED and value >= levels.critical
    # Between a raise and the next, the value went below the recovery level: no flood.
    raises = sum(1 for _, e, _ in happened if e == Event.RAISED)
    recoveries = sum(1 for v in series if v is not None and v < levels.recovery)
    assert raises <= recoveries + 1


# -- the evaluation, on the database ----------------------------------------------------------


def set_metrics(uuid: str, **metrics) -> None:
    gpu = Gpu.objects.get(uuid=uuid)
    gpu.metrics = {**(gpu.metrics or {}), **metrics}
    gpu.save(update_fields=["metrics"])


def memory_alerts(uuid: str = "GPU-a"):
    return Alert.objects.filter(rule__name="GPU memory", subject=f"gpu:{uuid}")


@pytest.mark.django_db
def test_the_evaluation_raises_holds_and_recovers_one_alert_per_gpu(pool):
    now = timezone.now()
    total = Gpu.objects.get(uuid="GPU-a").memory_mb
    for i, percent in enumerate([50, 76, 74, 76, 74.5, 61, 92, 65, 59]):
        set_metrics("GPU-a", memory_used_mb=int(total * percent / 100))
        evaluate_alerts(now + timedelta(minutes=i))
    alert = memory_alerts().get()
    assert (alert.state, alert.level, alert.resolved_by) == (AlertState.RESOLVED, CRITICAL, None)
    assert alert.escalated_at == now + timedelta(minutes=6)
    audit = AuditEvent.objects.filter(data__alert=alert.pk).order_by("pk")
    kinds = list(audit.values_list("kind", flat=True))
    assert kinds == [AuditKind.ALERT_RAISED, AuditKind.ALERT_ESCALATED, AuditKind.ALERT_RESOLVED]
    assert AuditEvent.objects.get(data__alert=alert.pk, kind=AuditKind.ALERT_RAISED).node == pool


@pytest.mark.django_db
def test_compute_utilisation_alerts_only_after_30_minutes_at_95(pool):
    start = timezone.now()
    for minute in range(31):
        set_metrics("GPU-b", utilization_pct=97.0)
        evaluate_alerts(start + timedelta(minutes=minute))
        alerts = Alert.objects.filter(rule__name="GPU compute utilisation", subject="gpu:GPU-b")
        assert alerts.count() == (1 if minute >= 30 else 0), minute


@pytest.mark.django_db
def test_a_node_that_stopped_answering_raises_node_lost_and_its_return_resolves_it(pool):
    Node.objects.filter(pk=pool.pk).update(last_heartbeat=timezone.now())
    evaluate_alerts(timezone.now() + timedelta(minutes=5))
    lost = Alert.objects.get(rule__name="Node lost", subject="node:node-1")
    assert lost.state == AlertState.FIRING
    Node.objects.filter(pk=pool.pk).update(last_heartbeat=timezone.now() + timedelta(minutes=6))
    evaluate_alerts(timezone.now() + timedelta(minutes=6))
    lost.refresh_from_db()
    assert lost.state == AlertState.RESOLVED


def test_beat_evaluates_the_rules_under_a_named_entry_that_expires():
    app.finalize()
    entry = app.conf.beat_schedule["alert-evaluation"]
    assert entry["task"] == run_alert_evaluation.name == "scheduling.tasks.run_alert_evaluation"
    assert entry["options"]["expires"] == entry["schedule"] == 60.0


@pytest.mark.django_db
def test_the_task_makes_the_defaults_and_counts_what_changed(pool):
    total = Gpu.objects.get(uuid="GPU-c").memory_mb
    set_metrics("GPU-c", memory_used_mb=total)
    assert run_alert_evaluation() == 1
    assert run_alert_evaluation() == 0
    assert AlertRule.objects.count() == len(default_rules())


# -- people: acknowledge, resolve, rules, API ----------------------------------------------------


def raise_memory_alert(now=None) -> Alert:
    total = Gpu.objects.get(uuid="GPU-a").memory_mb
    set_metrics("GPU-a", memory_used_mb=int(total * 0.8))
    evaluate_alerts(now or timezone.now())
    return memory_alerts().get()


@pytest.mark.django_db
def test_acknowledgement_and_resolution_are_audited_and_admins_only(pool, admin_user, owner):
    alert = raise_memory_alert()
    api = APIClient()
    api.force_authenticate(owner)
    assert api.get("/api/v1/alerts/").status_code == 403
    assert api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 403
    assert api.post(f"/api/v1/alerts/{alert.pk}/resolve/").status_code == 403
    assert api.get("/api/v1/alert-rules/").status_code == 403
    assert api.post("/api/v1/alert-rules/", {"name": "x"}, format="json").status_code == 403
    assert APIClient().get("/api/v1/alerts/").status_code in (401, 403)

    api.force_authenticate(admin_user)
    listed = api.get("/api/v1/alerts/?state=open").json()
    assert [a["id"] for a in listed] == [alert.pk]
    got = api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/").json()
    assert (got["state"], got["acknowledged_by"]) == ("acknowledged", "root")
    assert api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 409
    got = api.post(f"/api/v1/alerts/{alert.pk}/resolve/").json()
    assert (got["state"], got["resolved_by"]) == ("resolved", "root")
    assert api.post(f"/api/v1/alerts/{alert.pk}/resolve/").status_code == 409
    assert api.post("/api/v1/alerts/999999/resolve/").status_code == 404
    assert api.get("/api/v1/alerts/?state=open").json() == []
    assert api.get("/api/v1/alerts/?state=bogus").status_code == 400
    events = AuditEvent.objects.filter(data__alert=alert.pk, actor="user:root")
    assert sorted(events.values_list("kind", flat=True)) == sorted(
        [AuditKind.ALERT_ACKNOWLEDGED, AuditKind.ALERT_RESOLVED]
    )
    # Resolved by hand while still at 80%: no new alert until it comes down.
    evaluate_alerts(timezone.now() + timedelta(minutes=1))
    assert memory_alerts().count() == 1


@pytest.mark.django_db
def test_the_services_refuse_non_admins(pool, owner):
    alert = raise_memory_alert()
    with pytest.raises(Forbidden):
        check_acknowledge(owner, alert.pk)
    with pytest.raises(Forbidden):
        check_resolve(owner, alert.pk)


@pytest.mark.django_db
def test_an_escalation_makes_an_acknowledged_alert_fire_again(pool, admin_user):
    alert = raise_memory_alert()
    do_acknowledge(admin_user, check_acknowledge(admin_user, alert.pk))
    total = Gpu.objects.get(uuid="GPU-a").memory_mb
    set_metrics("GPU-a", memory_used_mb=int(total * 0.95))
    evaluate_alerts(timezone.now() + timedelta(minutes=1))
    alert.refresh_from_db()
    assert (alert.state, alert.level) == (AlertState.FIRING, CRITICAL)
    do_resolve(admin_user, check_resolve(admin_user, alert.pk))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"warning": 90, "critical": 80}, "critical"),
        ({"warning": 90, "critical": 90}, "critical"),
        ({"recovery": 75}, "recovery"),
        ({"recovery": 80}, "recovery"),
        ({"sustained_minutes": -1}, "sustained_minutes"),
        ({"metric": "queue_length"}, "scope"),
        ({"metric": "bogus"}, "metric"),
        ({"metric": "gpu_memory", "warning": 120}, "warning"),
        ({"warning": None, "critical": None}, "warning"),
        ({"warning": "hot"}, "warning"),
        ({"extra_recipients": ["not-an-address"]}, "extra_recipients"),
        ({"name": ""}, "name"),
        ({"name": "GPU memory"}, "name"),
    ],
)
def test_rule_validation_names_the_field_and_creates_nothing(admin_user, change, field):
    api = APIClient()
    api.force_authenticate(admin_user)
    api.get("/api/v1/alert-rules/")  # the defaults
    before = AlertRule.objects.count()
    rule = {"name": "Hot T4s", "metric": "gpu_temperature", "scope": "gpu", "warning": 75,
            "critical": 88, "recovery": 70, "sustained_minutes": 5}  # fmt: skip
    answer = api.post("/api/v1/alert-rules/", {**rule, **change}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    assert answer.json()[field][0].endswith("."), answer.json()
    assert AlertRule.objects.count() == before


@pytest.mark.django_db
def test_rules_are_listed_created_and_changed_with_an_audit(admin_user):
    api = APIClient()
    api.force_authenticate(admin_user)
    names = {r["name"] for r in api.get("/api/v1/alert-rules/").json()}
    assert {"GPU memory", "GPU temperature", "Pool usage", "Node lost", "Rack power"} <= names
    created = api.post(
        "/api/v1/alert-rules/",
        {"name": "Hot nodes", "metric": "gpu_temperature", "scope": "node", "warning": 80,
         "recovery": 75, "extra_recipients": ["noc@example.edu"]},
        format="json",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    rule_id = created.json()["id"]
    changed = api.patch(f"/api/v1/alert-rules/{rule_id}/", {"warning": 82}, format="json")
    assert changed.status_code == 200 and changed.json()["warning"] == 82
    bad = api.patch(f"/api/v1/alert-rules/{rule_id}/", {"recovery": 90}, format="json")
    assert bad.status_code == 400 and "recovery" in bad.json()
    assert AlertRule.objects.get(pk=rule_id).recovery == 75
    audits = AuditEvent.objects.filter(kind=AuditKind.ALERT_RULE_CHANGED, data__rule=rule_id)
    assert [a.data["after"]["warning"] for a in audits.order_by("pk")] == [80, 82]


# -- e-mail through a real SMTP server, and the live update -------------------------------------


def body_of(message: email.message.Message) -> str:
    return message.get_payload(decode=True).decode(message.get_content_charset())


@pytest.mark.django_db
def test_alerts_reach_the_admins_and_the_rules_extra_addresses_over_smtp(
    pool, make_user, smtp_inbox, django_capture_on_commit_callbacks
):
    make_user("ops", is_staff=True, email="ops@example.edu")
    make_user("student", email="student@example.edu")
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts(timezone.now())  # the defaults, nothing wrong yet
    AlertRule.objects.exclude(name="GPU memory").update(enabled=False)  # only this one speaks
    AlertRule.objects.filter(name="GPU memory").update(extra_recipients=["noc@example.edu"])
    smtp_inbox.messages.clear()
    total = Gpu.objects.get(uuid="GPU-a").memory_mb
    set_metrics("GPU-a", memory_used_mb=int(total * 0.8))
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts(timezone.now() + timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts(timezone.now() + timedelta(minutes=2))  # still high: no second mail
    rcpt = sorted(m["X-RcptTo"] for m in smtp_inbox.messages)
    assert rcpt == ["noc@example.edu", "ops@example.edu"]
    to_ops = next(m for m in smtp_inbox.messages if m["X-RcptTo"] == "ops@example.edu")
    subject = " ".join(str(to_ops["Subject"]).split())
    assert "GPU memory" in subject and "gpu:GPU-a" in subject
    assert "Hello ops," in body_of(to_ops) and "80" in body_of(to_ops)
    smtp_inbox.messages.clear()
    set_metrics("GPU-a", memory_used_mb=int(total * 0.5))
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts(timezone.now() + timedelta(minutes=3))
    assert sorted(m["X-RcptTo"] for m in smtp_inbox.messages) == rcpt
    assert all("resolved" in " ".join(str(m["Subject"]).split()) for m in smtp_inbox.messages)


@pytest.mark.django_db(transaction=True)
def test_an_admins_open_page_receives_the_alert_over_the_updates_socket(pool, admin_user):
    async def listen_and_raise() -> dict:
        communicator = WebsocketCommunicator(UpdatesConsumer.as_asgi(), "/ws/updates/")
        communicator.scope["user"] = admin_user
        connected, _code = await communicator.connect()
        assert connected
        await database_sync_to_async(raise_memory_alert)()
        message = {"type": "admin.audit"}
        while message["type"] == "admin.audit":  # the raise is audited too
            message = await asyncio.wait_for(communicator.receive_json_from(), timeout=5)
        await communicator.disconnect()
        return message

    message = async_to_sync(listen_and_raise)()
    assert message["type"] == "alert.update"
    got = message["alert"]
    assert (got["subject"], got["state"], got["level"], got["state_label"]) == (
        "gpu:GPU-a",
        "firing",
        "warning",
        "Firing",
    )


@pytest.mark.django_db(transaction=True)
def test_the_alert_update_leaves_only_after_the_commit(pool, monkeypatch):
    sent = []
    monkeypatch.setattr(events, "_send", lambda group, payload: sent.append((group, payload)))
    with transaction.atomic():
        alert = raise_memory_alert()
        assert sent == []
    assert [(g, p["type"], p["alert"]["id"]) for g, p in sent if p["type"] != "admin.audit"] == [
        (events.ADMIN_GROUP, "alert.update", alert.pk)
    ]


# -- the effect on placement -----------------------------------------------------------------


def submit(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def placed_gpu(session: Session) -> str | None:
    session.refresh_from_db()
    allocation = session.allocations.filter(released_at=None).select_related("slice__gpu").first()
    return allocation.slice.gpu.uuid if allocation else None


@pytest.mark.django_db
def test_a_gpu_above_the_temperature_rules_level_gets_no_new_work(pool, owner, profile):
    evaluate_alerts(timezone.now())  # the default rules: temperature 85 °C
    for uuid in ("GPU-a", "GPU-b"):
        set_metrics(uuid, temperature_c=86.0)
    set_metrics("GPU-c", temperature_c=40.0)
    session = submit(owner, profile)
    do_scheduling_cycle()
    assert placed_gpu(session) == "GPU-c"
    # The rule's level is the one the engine uses: at 35 °C nothing is cool enough.
    AlertRule.objects.filter(name="GPU temperature").update(warning=35.0, recovery=30.0)
    second = submit(owner, profile)
    do_scheduling_cycle()
    second.refresh_from_db()
    assert (second.state, second.reason_code) == (SessionState.QUEUED, "waiting_hot")
    assert second.reason_params["limit_c"] == 35.0


@pytest.mark.django_db
def test_a_rack_at_its_power_warning_gets_no_new_work_until_its_load_drops(pool, owner, profile):
    Node.objects.filter(pk=pool.pk).update(labels={"rack": "r1", "rack_power_budget_w": 1000})
    for uuid, watts in (("GPU-a", 400.0), ("GPU-b", 400.0), ("GPU-c", 150.0)):
        set_metrics(uuid, power_w=watts)  # 95% of the budget
    evaluate_alerts(timezone.now())
    assert Alert.objects.open().filter(rule__name="Rack power", subject="rack:r1").exists()
    session = submit(owner, profile)
    do_scheduling_cycle()
    assert placed_gpu(session) is None
    set_metrics("GPU-c", power_w=0.0)  # 80%: below the warning, not below the recovery level
    evaluate_alerts(timezone.now() + timedelta(minutes=1))
    do_scheduling_cycle()
    assert placed_gpu(session) is None
    set_metrics("GPU-a", power_w=300.0)  # 70%: recovered
    evaluate_alerts(timezone.now() + timedelta(minutes=2))
    assert not Alert.objects.open().filter(rule__name="Rack power").exists()
    do_scheduling_cycle()
    assert placed_gpu(session) is not None


def test_the_engine_places_nothing_on_a_stopped_rack_cpu_only_and_preemption_included():
    node = NodeState(1, "n1", True, 64, 262144, rack="r1")
    free = FreeSlice(1, 1, 1, "mig", 9984, "A100", milli=142, power_w=40.0)
    busy = FreeSlice(2, 1, 1, "mig", 9984, "A100", milli=142, power_w=40.0)
    gpu_ask = QueuedRequest(1, 3, T0, 1, 4000, ("mig",), 1.0, 1024)
    cpu_ask = QueuedRequest(2, 3, T0, 0, 0, (), 1.0, 1024)
    thesis = QueuedRequest(3, 1, T0, 1, 4000, ("mig",), 1.0, 1024)
    hobby = RunningSession(9, 3, 1, (busy,), 1.0, 1024, T0 - timedelta(hours=1),
                           T0 + timedelta(hours=1))  # fmt: skip
    for stopped in (False, True):
        rack = Rack("r1", 10_000, 1_000, stopped=stopped)
        placing = plan(Snapshot((node,), (free,), (gpu_ask, cpu_ask), racks=(rack,)), T0)
        preempting = plan(Snapshot((node,), (), (thesis,), (hobby,), racks=(rack,)), T0)
        if stopped:
            assert not placing.placements and not preempting.preemptions
            assert {q.session_id for q in placing.queue} == {1, 2}
        else:
            assert sorted(p.session_id for p in placing.placements) == [1, 2]
            assert [p.victim_id for p in preempting.preemptions] == [9]
