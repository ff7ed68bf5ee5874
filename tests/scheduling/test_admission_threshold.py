"""One admission threshold (issue 39): the "Pool usage" alert rule's levels, edited in the
console and audited, drive admission (the student's reason names the level), the alert,
/metrics and the API at once; migration 0031 moved PoolPolicy's levels into the rule.

Real PostgreSQL and the real engine; the pool is the conftest's ten slices."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scheduling.choices import AuditKind, SessionState
from scheduling.models import Alert, AlertRule, AuditEvent, Session
from scheduling.services import ServiceError
from scheduling.services.alert_changes import check_rule
from scheduling.services.alerts import ensure_default_rules, evaluate_alerts
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.lifecycle import do_transition
from scheduling.services.metrics import render_metrics
from scheduling.services.pool import admission, pool_alert_level
from scheduling.services.sessions import check_submit, do_submit

BEFORE = [("scheduling", "0029_course_folders")]
AFTER = [("scheduling", "0031_one_admission_threshold")]


def pool_usage_rule() -> AlertRule:
    ensure_default_rules()
    return AlertRule.objects.get(metric="pool_usage")


def fill(make_user, profile, n: int) -> None:
    """``n`` hobby desktops running (the conftest's MIG slices are 142 of 2136 milli)."""
    for i in range(n):
        user = make_user(f"filler{i}")
        do_submit(user, check_submit(user, profile.pk, "hobby", None))
    do_scheduling_cycle()
    for session in Session.objects.filter(state=SessionState.PLACED):
        started = timezone.now() - timedelta(hours=1)
        do_transition(session.pk, SessionState.RUNNING, actor="test", started_at=started)


def metric(text: bytes, family: str, **labels: str) -> float:
    found = {f.name: f for f in text_string_to_metric_families(text.decode())}
    [value] = [s.value for s in found[family].samples if s.labels == labels]
    return value


@pytest.mark.django_db
def test_a_console_edit_moves_admission_the_alert_metrics_and_the_api_at_once(
    make_user, admin_user, owner, profile, pool
):
    rule = pool_usage_rule()
    assert (rule.warning, rule.critical) == (80.0, 90.0)
    fill(make_user, profile, 8)  # 8 x 142 / 2136 = 53% of the pool
    do_submit(owner, check_submit(owner, profile.pk, "hobby", None))  # under 90%: admitted
    evaluate_alerts()
    assert pool_alert_level() == "ok"
    student = Client()
    student.force_login(owner)
    assert 'id="hobby-refused"' not in student.get("/").content.decode()

    admin = Client()
    admin.force_login(admin_user)
    form = {"name": rule.name, "metric": "pool_usage", "scope": "pool", "warning": "40"}
    form |= {"critical": "50", "recovery": "30", "sustained_minutes": "0", "enabled": "on"}
    page = admin.get(f"/console/alerts/rules/{rule.pk}/").content.decode()
    assert 'id="admission-hint"' in page
    assert admin.post(f"/console/alerts/rules/{rule.pk}/", form).status_code == 302
    # The edit is in the audit, with before and after.
    change = AuditEvent.objects.filter(kind=AuditKind.ALERT_RULE_CHANGED).latest("pk")
    assert change.data["rule"] == rule.pk and change.actor == f"user:{admin_user.username}"
    assert change.data["before"]["critical"] == 90.0 and change.data["after"]["critical"] == 50.0

    # Admission: a hobby submit is refused, the reason names the block level.
    assert (admission().warn_percent, admission().block_percent) == (40.0, 50.0)
    with pytest.raises(ServiceError) as refused:
        check_submit(make_user("late"), profile.pk, "hobby", None)
    assert "at or above its block level of 50%" in refused.value.message
    assert refused.value.field == "purpose"
    # The request form says so before anyone asks, in the reader's language.
    home = student.get("/").content.decode()
    assert 'id="hobby-refused"' in home and "block level of 50%" in home
    # The alert: the rule's own, critical; the pool's level is "block".
    evaluate_alerts()
    [alert] = Alert.objects.open().filter(rule=rule)
    assert alert.level == "critical" and pool_alert_level() == "block"
    # /metrics and the API read the same levels and the same alert.
    text = render_metrics(timezone.now())
    assert metric(text, "deskpool_pool_threshold_ratio", level="block") == pytest.approx(0.5)
    assert metric(text, "deskpool_pool_threshold_ratio", level="warn") == pytest.approx(0.4)
    assert metric(text, "deskpool_pool_alert_level") == 2
    answer = admin.get("/api/v1/pool/").json()
    assert (answer["warn_percent"], answer["block_percent"]) == (40.0, 50.0)
    assert answer["alert_level"] == "block"


@pytest.mark.django_db
def test_the_pool_usage_rule_stays_one_with_both_levels(admin_user):
    rule = pool_usage_rule()
    fields = {"name": "Second pool usage", "metric": "pool_usage", "scope": "pool"}
    with pytest.raises(ServiceError) as second:
        check_rule(admin_user, {**fields, "warning": 50, "critical": 60})
    assert second.value.field == "metric" and "edit that one" in second.value.message
    with pytest.raises(ServiceError) as moved:
        check_rule(admin_user, {"metric": "queue_length"}, rule)
    assert moved.value.field == "metric"
    with pytest.raises(ServiceError) as no_block:
        check_rule(admin_user, {"critical": None}, rule)
    assert no_block.value.field == "critical" and "both levels" in no_block.value.message
    # Another metric may still be watched by another rule.
    other = check_rule(admin_user, {"name": "Queue", "metric": "queue_length", "scope": "pool",
                                    "warning": 5})  # fmt: skip
    assert other.fields["metric"] == "queue_length"


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_policys_levels():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    old.get_model("scheduling", "PoolPolicy").objects.create(warn_percent=65, block_percent=75)
    rule_model = old.get_model("scheduling", "AlertRule")
    rule_model.objects.create(name="GPU memory", metric="gpu_memory", scope="gpu", warning=75)
    rule_model.objects.create(
        name="Pool usage", metric="pool_usage", scope="pool", warning=80, critical=90, recovery=70
    )
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    rule = new.get_model("scheduling", "AlertRule").objects.get(metric="pool_usage")
    assert (rule.warning, rule.critical, rule.recovery) == (65.0, 75.0, 55.0)
    policy_fields = {f.name for f in new.get_model("scheduling", "PoolPolicy")._meta.fields}
    assert not {"warn_percent", "block_percent", "alert_level"} & policy_fields
    # Back and forth: the levels return to the policy.
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    back = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    policy = back.get_model("scheduling", "PoolPolicy").objects.get()
    assert (policy.warn_percent, policy.block_percent) == (65, 75)
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_makes_the_rule_where_there_was_none():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    old.get_model("scheduling", "PoolPolicy").objects.create(warn_percent=70, block_percent=95)
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    [rule] = new.get_model("scheduling", "AlertRule").objects.all()
    assert (rule.name, rule.warning, rule.critical, rule.recovery) == ("Pool usage", 70, 95, 60)
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    # The other default rules still come on first use, the pool usage one kept.
    ensure_default_rules()
    assert AlertRule.objects.filter(metric="pool_usage").count() == 1
    assert AlertRule.objects.get(metric="pool_usage").critical == 95
    assert AlertRule.objects.filter(metric="gpu_memory").exists()
