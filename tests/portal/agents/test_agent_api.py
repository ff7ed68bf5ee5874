"""The agent API: one-time join, node tokens, desired state and reports."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from people.models import Member
from scheduling.choices import AuditKind, SessionState
from scheduling.engine.reasons import Code, Reason
from scheduling.models import Allocation, AuditEvent, Node, Session
from scheduling.models.sessions import home_volume_of
from scheduling.services.agent_wake import desired_version
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.installation import installation_id
from scheduling.services.lifecycle import changes_desired, do_transition
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_stop, do_submit

from ...conftest import gpu_inventory, registration

pytestmark = pytest.mark.django_db


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def test_join_token_works_once_and_the_node_token_re_registers():
    join = do_create_join_token("gpu-x", actor="test")
    body = registration("gpu-x", [gpu_inventory("GPU-x", 0, mig_slices=2)], join)
    first = APIClient().post("/api/agent/v1/register/", body, format="json")
    assert first.status_code == 201, first.content
    node_token = first.json()["node_token"]
    assert Node.objects.get().token_hash != node_token  # stored hashed

    again = APIClient().post("/api/agent/v1/register/", body, format="json")
    assert again.status_code == 401

    body.pop("join_token")
    body["gpus"] = [gpu_inventory("GPU-x", 0, mig_slices=3)]
    refreshed = agent(node_token).post("/api/agent/v1/register/", body, format="json")
    assert refreshed.status_code == 200
    assert "node_token" not in refreshed.json()
    assert Node.objects.get().gpus.get().slices.filter(present=True).count() == 3


def test_a_protocol_version_the_portal_does_not_speak_is_refused_with_409():
    join = do_create_join_token("gpu-y", actor="test")
    body = registration("gpu-y", [], join)
    body["protocol_version"] = 99
    answer = APIClient().post("/api/agent/v1/register/", body, format="json")
    assert answer.status_code == 409
    assert "protocol" in answer.json()["detail"]


def test_a_bad_registration_gets_field_errors():
    answer = APIClient().post("/api/agent/v1/register/", {"hostname": "x"}, format="json")
    assert answer.status_code == 400
    body = answer.json()
    assert body["detail"].startswith("Invalid Registration: ")
    assert {"field": "gpus", "message": "Field required", "type": "missing"} in body["errors"]


def test_agent_endpoints_need_a_node_token():
    assert APIClient().get("/api/agent/v1/desired/").status_code == 401
    assert agent("dpn_wrong").get("/api/agent/v1/desired/").status_code == 401


def test_placed_session_is_desired_then_reported_running_then_stopped(
    owner, profile, register_node
):
    node, token = register_node("gpu-z", [gpu_inventory("GPU-z", 0, mig_slices=1)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()

    desired = agent(token).get("/api/agent/v1/desired/").json()["sessions"]
    assert [d["session_id"] for d in desired] == [session.pk]
    assert desired[0]["gpu_devices"] == ["MIG-GPU-z-0"]
    assert len(desired[0]["vnc_password"]) == 8
    assert (
        desired[0]["home_volume"]
        == home_volume_of(owner)
        == f"deskpool-{installation_id()}-home-ada"
    )

    report = f"/api/agent/v1/sessions/{session.pk}/report/"
    assert agent(token).post(report, {"state": "STARTING"}, format="json").json() == {
        "state": "STARTING"
    }
    running = agent(token).post(
        report,
        {"state": "RUNNING", "host": "127.0.0.1", "port": 32000, "audio_port": 32001},
        format="json",
    )
    assert running.json() == {"state": "RUNNING"}
    session.refresh_from_db()
    assert (session.desktop_port, session.started_at is not None) == (32000, True)
    assert session.desktop_audio_port == 32001

    do_stop(owner, session)
    assert agent(token).get("/api/agent/v1/desired/").json()["sessions"] == []
    assert Allocation.objects.filter(released_at=None).count() == 1  # held until it is gone
    ended = agent(token).post(report, {"state": "ENDED"}, format="json")
    assert ended.json() == {"state": "ENDED"}
    assert Allocation.objects.filter(released_at=None).count() == 0

    late = agent(token).post(report, {"state": "RUNNING", "port": 32000}, format="json")
    assert late.status_code == 409
    assert late.json()["state"] == "ENDED"


def test_a_failed_start_frees_the_slice_with_the_reason(owner, profile, register_node):
    _, token = register_node("gpu-f", [gpu_inventory("GPU-f", 0, mig_slices=1)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    answer = agent(token).post(
        f"/api/agent/v1/sessions/{session.pk}/report/",
        {"state": "FAILED", "reason": "image not found"},
        format="json",
    )
    assert answer.json() == {"state": "FAILED"}
    session.refresh_from_db()
    # The person reads a plain cause (scheduling.presenters); the agent's words are the admins'.
    assert (session.state, session.reason_code) == (SessionState.FAILED, Code.START_FAILED)
    assert session.reason_params == {"cause": "image_missing", "node": "gpu-f"}
    assert "image is missing" in session.reason and "image not found" not in session.reason
    assert not Allocation.objects.filter(released_at=None).exists()


def test_another_nodes_session_is_not_found(owner, profile, register_node):
    register_node("gpu-1", [gpu_inventory("GPU-1", 0, mig_slices=1)])
    _, other_token = register_node("gpu-2", [])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    assert Session.objects.get(pk=session.pk).node.hostname == "gpu-1"
    answer = agent(other_token).post(
        f"/api/agent/v1/sessions/{session.pk}/report/", {"state": "RUNNING"}, format="json"
    )
    assert answer.status_code == 404


def test_a_session_placed_again_on_the_same_node_is_a_new_placement(owner, profile, register_node):
    """Requeued and placed on the same node before its agent noticed: the desired entry
    names the new placement, and reports about the old one are refused, not applied."""
    _, token = register_node("gpu-p", [gpu_inventory("GPU-p", 0, mig_slices=1)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    [first] = agent(token).get("/api/agent/v1/desired/").json()["sessions"]
    report = f"/api/agent/v1/sessions/{session.pk}/report/"
    old = first["placement"]
    assert old
    for state in ("STARTING", "RUNNING"):
        answer = agent(token).post(
            report, {"state": state, "port": 32001, "placement": old}, format="json"
        )
        assert answer.json() == {"state": state}

    silent = Reason(Code.NOTE, {"text": "node went silent"})
    do_transition(session.pk, SessionState.QUEUED, actor="test", reason=silent)
    do_scheduling_cycle()
    [second] = agent(token).get("/api/agent/v1/desired/").json()["sessions"]

    assert second["session_id"] == session.pk
    assert second["placement"] not in ("", old)
    assert second["vnc_password"] != first["vnc_password"]
    for state in ("ENDED", "LOST", "RUNNING"):
        stale = agent(token).post(report, {"state": state, "placement": old}, format="json")
        assert stale.status_code == 409, stale.content
        assert stale.json()["state"] == "PLACED"
    session.refresh_from_db()
    assert session.state == SessionState.PLACED
    assert Allocation.objects.filter(session=session, released_at=None).count() == 1

    new = agent(token).post(
        report, {"state": "STARTING", "placement": second["placement"]}, format="json"
    )
    assert new.json() == {"state": "STARTING"}
    # A report without a placement (an older agent) is applied as before.
    running = agent(token).post(report, {"state": "RUNNING", "port": 32002}, format="json")
    assert running.json() == {"state": "RUNNING"}


def test_batched_reports_apply_in_order_and_a_desktop_is_reached_on_the_registered_address(
    owner, profile, register_node
):
    node, token = register_node("gpu-b", [gpu_inventory("GPU-b", 0, mig_slices=2)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    batch = {
        "reports": [
            {"session_id": session.pk, "state": "STARTING"},
            # An agent naming another host for its desktop: nothing may point there.
            {"session_id": session.pk, "state": "RUNNING", "host": "10.66.6.6", "port": 32001},
            {"session_id": 999999, "state": "RUNNING", "port": 32002},  # not this node's
        ]
    }
    answer = agent(token).post("/api/agent/v1/reports/", batch, format="json")
    assert answer.status_code == 200, answer.content
    # The STARTING and RUNNING of one desktop in one batch: PLACED goes straight to RUNNING
    # (one transition, one broadcast), and the STARTING is answered as the RUNNING.
    assert [(r["outcome"], r.get("state")) for r in answer.json()["results"]] == [
        ("applied", "RUNNING"),
        ("applied", "RUNNING"),
        ("refused", None),
    ]
    moves = AuditEvent.objects.filter(session=session, kind=AuditKind.SESSION_TRANSITION)
    assert [(e.data["from"], e.data["to"]) for e in moves.order_by("pk")] == [
        ("QUEUED", "PLACED"),
        ("PLACED", "RUNNING"),
    ]
    session.refresh_from_db()
    assert (session.state, session.desktop_host, session.desktop_port) == (
        "RUNNING",
        node.address,
        32001,
    )

    do_stop(owner, session)
    again = {"reports": [{"session_id": session.pk, "state": "RUNNING", "port": 32001}]}
    late = agent(token).post("/api/agent/v1/reports/", again, format="json").json()
    assert late["results"][0]["outcome"] == "conflict"  # stop that desktop
    assert late["results"][0]["state"] == "STOPPING"

    empty = agent(token).post("/api/agent/v1/reports/", {"reports": []}, format="json")
    assert empty.status_code == 400


def test_a_desktop_reaching_running_does_not_wake_its_own_agent_but_its_stop_does(
    owner, profile, register_node, django_capture_on_commit_callbacks
):
    node, token = register_node("gpu-w", [gpu_inventory("GPU-w", 0, mig_slices=2)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    with django_capture_on_commit_callbacks(execute=True):
        do_scheduling_cycle()
    placed = desired_version(node.pk)
    [desired] = agent(token).get("/api/agent/v1/desired/").json()["sessions"]
    batch = {
        "reports": [
            {"session_id": session.pk, "state": state, "port": 32001, "placement": p}
            for state, p in (("STARTING", desired["placement"]), ("RUNNING", desired["placement"]))
        ]
    }
    with django_capture_on_commit_callbacks(execute=True):
        assert agent(token).post("/api/agent/v1/reports/", batch, format="json").status_code == 200
    # What the node should run is the same: its agent is not sent to fetch it again.
    assert desired_version(node.pk) == placed
    session.refresh_from_db()
    assert session.state == SessionState.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        do_stop(owner, session)
    assert desired_version(node.pk) == placed + 1  # the desktop leaves the desired state


def test_which_transitions_change_a_nodes_desired_state():
    S = SessionState
    assert not changes_desired(S.PLACED, S.RUNNING, 7, 7)
    assert not changes_desired(S.RUNNING, S.PREEMPTING, 7, 7)
    assert changes_desired(S.QUEUED, S.PLACED, None, 7)  # placed
    assert changes_desired(S.RUNNING, S.STOPPING, 7, 7)  # leaves
    assert changes_desired(S.RUNNING, S.QUEUED, 7, None)  # requeued off the node
    assert changes_desired(S.PREEMPTED, S.PLACED, None, 8)


def test_a_desired_session_carries_the_language_its_person_saved(owner, profile, register_node):
    """The desktop's locale follows the account page's language (DESKPOOL_LANGUAGE in the
    image); none saved, or one the desktop does not know: the image's default."""
    _, token = register_node("gpu-l", [gpu_inventory("GPU-l", 0, mig_slices=1)])
    do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()

    def language() -> str:
        return agent(token).get("/api/agent/v1/desired/").json()["sessions"][0]["language"]

    member = Member.objects.filter(user=owner).first()
    assert member is None or member.language == ""
    assert language() == ""
    member, _ = Member.objects.update_or_create(user=owner, defaults={"language": "zh-hans"})
    assert language() == "zh-hans"
    Member.objects.filter(pk=member.pk).update(language="fr")  # not a portal language
    assert language() == ""
