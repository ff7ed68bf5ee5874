"""Homes kept on one node (issue 27), on the database: the cycle places a person's desktop on
the node that keeps their home, over a node that scores better, and elsewhere when that node
is full; the reason and the audit say which. ``home_place.home_nodes`` is what "keeps the
home" means."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone, translation

from scheduling.choices import AuditKind, SessionState
from scheduling.labels import detail_rows
from scheduling.models import AuditEvent, Node, Session, UsageRecord
from scheduling.services.agent_sessions import do_report
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.health import do_clear_cordon, do_cordon
from scheduling.services.home_place import home_nodes
from scheduling.services.sessions import check_submit, do_stop, do_submit

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db


def mig_node(register_node, hostname: str, slices: int) -> Node:
    node, _ = register_node(hostname, [gpu_inventory(f"GPU-{hostname}", 0, mig_slices=slices)])
    return node


def submit(user, profile) -> Session:  # type: ignore[no-untyped-def]
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def run_on_cycle(session: Session) -> Session:
    """Placed by a cycle and reported RUNNING by its node's agent."""
    do_scheduling_cycle()
    session.refresh_from_db()
    assert session.state == SessionState.PLACED, session.reason
    assert session.node is not None
    do_report(session.node, session.pk, {"state": "RUNNING", "port": 32000})
    return Session.objects.get(pk=session.pk)


def first_desktop_on(node: Node, other: Node, user, profile) -> Session:  # type: ignore[no-untyped-def]
    """The person's first desktop, run on ``node`` (``other`` cordoned meanwhile)."""
    do_cordon(other, actor="test", reason="keep this one off")
    session = run_on_cycle(submit(user, profile))
    do_clear_cordon(other, actor="test")
    assert session.node_id == node.pk
    return session


def placed_event(session: Session) -> AuditEvent:
    return AuditEvent.objects.get(session_id=session.pk, kind=AuditKind.SESSION_PLACED)


@pytest.mark.parametrize("shared", [False, True])
def test_a_second_desktop_goes_to_the_node_that_keeps_the_home_over_a_better_one(
    register_node, make_user, profile, shared: bool
):
    busy = mig_node(register_node, "gpu-busy", 7)  # the lower id: it wins ties
    home = mig_node(register_node, "gpu-home", 7)
    Node.objects.filter(pk=home.pk).update(home_root_shared=shared)
    ada, ben, cy = make_user("ada"), make_user("ben"), make_user("cy")
    assert run_on_cycle(submit(ben, profile)).node_id == busy.pk  # busy: its GPU is in use
    first = first_desktop_on(home, busy, ada, profile)
    do_stop(ada, first)
    do_report(home, first.pk, {"state": "ENDED"})  # gpu-home is empty again

    # One cycle: cy (no home anywhere) shows where the engine puts this profile on its own.
    control, second = submit(cy, profile), submit(ada, profile)
    do_scheduling_cycle()
    control.refresh_from_db()
    second.refresh_from_db()

    assert control.node_id == busy.pk
    assert (control.reason_code, control.reason_params) == ("placed", {})
    assert "home" not in placed_event(control).data
    if shared:  # the home follows her anywhere: no preference
        assert second.node_id == busy.pk
        assert (second.reason_code, second.reason_params) == ("placed", {})
        assert "home" not in placed_event(second).data
        return
    assert second.node_id == home.pk
    assert second.state == SessionState.PLACED
    assert (second.reason_code, second.reason_params) == ("placed_home", {"node": "gpu-home"})
    with translation.override("en"):
        assert second.reason.startswith("placed on node gpu-home, which keeps your home folder")
    event = placed_event(second)
    assert event.data["home"] == "kept"
    with translation.override("zh-hans"):  # the console's audit page, in words
        assert ("home", "主目录", "已分配到保存它的节点") in detail_rows(event.data)
    moved = AuditEvent.objects.get(
        session_id=second.pk, kind=AuditKind.SESSION_TRANSITION, data__to="PLACED"
    )
    assert moved.data["reason_code"] == "placed_home"


def test_a_full_home_node_sends_the_desktop_elsewhere_and_says_so(
    register_node, make_user, profile
):
    busy = mig_node(register_node, "gpu-busy", 7)
    home = mig_node(register_node, "gpu-home", 1)  # one slice: her first desktop fills it
    ada = make_user("ada")
    first_desktop_on(home, busy, ada, profile)

    second = submit(ada, profile)
    do_scheduling_cycle()
    second.refresh_from_db()

    assert (second.state, second.node_id) == (SessionState.PLACED, busy.pk)
    assert (second.reason_code, second.reason_params) == (
        "placed_away",
        {"node": "gpu-busy", "home": "gpu-home"},
    )
    with translation.override("zh-hans"):
        assert "gpu-home" in second.reason and "主目录" in second.reason
    event = placed_event(second)
    assert (event.data["home"], event.data["home_node"]) == ("away", "gpu-home")


def run_record(session: Session, node: str, hours_ago: float) -> None:
    """A finished run of the session on ``node`` (as ``usage_runs`` writes one)."""
    start = timezone.now() - timedelta(hours=hours_ago)
    UsageRecord.objects.create(
        session=session,
        user=session.user,
        username=session.user.get_username(),
        purpose=session.purpose,
        profile_slug=session.profile.slug,
        node_hostname=node,
        started_at=start,
        ended_at=start + timedelta(minutes=30),
    )


def test_home_nodes_are_its_own_last_node_then_the_persons_then_suspended_ones(
    register_node, make_user, profile
):
    n1, n2, n3, n4, n5 = (mig_node(register_node, f"n{i}", 1) for i in range(1, 6))
    Node.objects.filter(pk=n4.pk).update(home_root_shared=True)
    ada, ben, cy = make_user("ada"), make_user("ben"), make_user("cy")
    waiting = Session.objects.create(user=ada, profile=profile, purpose="hobby")
    latest = Session.objects.create(user=ada, profile=profile, purpose="hobby", state="ENDED")
    asleep = [
        Session.objects.create(user=ada, profile=profile, purpose="hobby", state="SUSPENDED")
        for _ in range(3)
    ]
    run_record(waiting, "n1", hours_ago=5)  # requeued: it ran on n1 before
    run_record(latest, "n2", hours_ago=1)  # her latest desktop
    run_record(asleep[0], "n5", hours_ago=4)
    run_record(asleep[1], "n3", hours_ago=3)  # suspended later than the one on n5
    run_record(asleep[2], "n4", hours_ago=2)  # shared homes: no preference
    # ben's latest run spanned two nodes (one record names both): no single node has it.
    bens = Session.objects.create(user=ben, profile=profile, purpose="hobby")
    run_record(Session.objects.create(user=ben, profile=profile, purpose="hobby"), "n1", 9)
    run_record(Session.objects.create(user=ben, profile=profile, purpose="hobby"), "n1,n2", 1)
    never = Session.objects.create(user=cy, profile=profile, purpose="hobby")

    found = home_nodes([waiting, bens, never])

    assert found == {waiting.pk: (n1.pk, n2.pk, n3.pk, n5.pk)}
