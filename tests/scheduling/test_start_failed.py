"""A failed start is not a dead end (issue 25, item 8b and 8c).

The agent's FAILED report carries a failure code next to Docker's words: the person reads a
plain cause in their language with "Try again" and "Pick another profile"; the raw words are
kept for the admins (the audit event); and the node's admins get an alert.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import translation

from scheduling.choices import AuditKind, SessionState
from scheduling.engine.reasons import Code
from scheduling.events import session_payload
from scheduling.models import Alert, AuditEvent, Session
from scheduling.services.agent_sessions import do_report
from scheduling.services.alerts import evaluate_alerts

pytestmark = pytest.mark.django_db

DOCKER_WORDS = (
    "the Docker engine refused the desktop: Range of CPUs is from 0.01 to 2.00, as there are "
    "only 2 CPUs available"
)


@pytest.fixture(autouse=True)
def _default_language_after():
    yield
    translation.deactivate()


@pytest.fixture
def placed(pool, owner, profile) -> Session:
    return Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state=SessionState.PLACED, node=pool
    )


def fail(session: Session, **report) -> Session:
    return do_report(session.node, session.pk, {"state": "FAILED", **report})


def test_a_failed_start_reads_as_a_plain_cause_without_the_engines_words(placed):
    failed = fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")

    assert failed.state == SessionState.FAILED
    assert failed.reason_code == Code.START_FAILED
    assert failed.reason_params == {"cause": "not_enough_cpus", "node": "node-1"}
    payload = session_payload(Session.objects.get(pk=placed.pk))
    assert payload["reason"] == (
        "Your desktop could not start: its node has fewer CPUs than this profile needs. The "
        "admins have been told. Try again, or pick another profile."
    )
    assert "Docker" not in str(payload)  # nor in the parameters the page's script gets
    with translation.override("zh-hans"):
        chinese = session_payload(Session.objects.get(pk=placed.pk))["reason"]
    assert "CPU" in chinese and "重试" in chinese and "Docker" not in chinese


def test_the_engines_words_are_kept_for_the_admins_in_the_audit_event(placed):
    fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")
    event = AuditEvent.objects.get(
        kind=AuditKind.SESSION_TRANSITION, session_id=placed.pk, data__to="FAILED"
    )
    assert event.node_id == placed.node_id
    assert event.data["detail"] == DOCKER_WORDS
    assert event.data["cause"] == "not_enough_cpus"


def test_an_older_agent_without_a_code_gets_one_from_its_words(placed):
    failed = fail(placed, reason="image deskpool/x:1 is not present on node node-1")
    assert failed.reason_params["cause"] == "image_missing"
    unknown = fail(placed, reason="disk on fire", failure="a_code_from_the_future")
    assert unknown.reason_params["cause"] == "image_missing"  # already FAILED: unchanged


def test_the_failed_card_offers_try_again_and_another_profile_in_chinese(placed, owner):
    fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(owner)
    page = client.get(f"/sessions/{placed.pk}/").content.decode()
    assert 'id="retry"' in page and "重试" in page
    assert 'id="pick-another"' in page and "选择其他配置" in page
    assert "Range of CPUs" not in page and "Docker" not in page


def test_try_again_submits_the_same_request_anew(placed, owner):
    fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(owner)
    answer = client.post(f"/sessions/{placed.pk}/retry/")
    again = Session.objects.exclude(pk=placed.pk).get()
    assert answer.status_code == 302 and answer.url == f"/sessions/{again.pk}/"
    assert (again.state, again.profile_id, again.purpose) == ("QUEUED", placed.profile_id, "hobby")
    # Only a failed session may be tried again.
    answer = client.post(f"/sessions/{again.pk}/retry/", follow=True)
    assert Session.objects.count() == 2
    assert "can be tried again" in answer.content.decode()


def test_someone_elses_failed_session_cannot_be_tried_again(placed, stranger):
    fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")
    client = Client()
    client.force_login(stranger)
    assert client.post(f"/sessions/{placed.pk}/retry/").status_code == 404
    assert Session.objects.count() == 1


def test_a_failed_start_raises_an_alert_on_its_node_for_the_admins(placed):
    evaluate_alerts()
    assert not Alert.objects.filter(rule__name="Desktop start failed").exists()

    fail(placed, reason=DOCKER_WORDS, failure="not_enough_cpus")
    evaluate_alerts()

    alert = Alert.objects.get(rule__name="Desktop start failed")
    assert (alert.subject, alert.value) == ("node:node-1", 1.0)
