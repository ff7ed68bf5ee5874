"""A cycle's placements applied together (``placement.apply_placements``): the same sessions,
holds, audit events and wakes as one by one, in a number of queries that does not grow with
the placements, and one by one again when one of them raced."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.choices import AuditKind, SessionState
from scheduling.models import Allocation, AuditEvent, Session
from scheduling.services import placement as placement_service
from scheduling.services.agent_wake import desired_version
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import give_thesis_grant, gpu_inventory

pytestmark = pytest.mark.django_db


def submitted(make_user, profile, count: int, prefix: str) -> list[Session]:
    sessions = []
    for n in range(count):
        person = make_user(f"{prefix}-{n}")
        give_thesis_grant(person)
        sessions.append(do_submit(person, check_submit(person, profile.pk, "thesis", None)))
    return sessions


def test_a_cycle_places_many_as_one_by_one(
    make_user, profile, register_node, django_capture_on_commit_callbacks
):
    node, _ = register_node("gpu-p", [gpu_inventory("GPU-p", 0, mig_slices=6)])
    before = desired_version(node.pk)
    sessions = submitted(make_user, profile, 5, "p")

    with django_capture_on_commit_callbacks(execute=True):
        result = do_scheduling_cycle()

    assert (result.placed, result.conflicts) == (5, 0)
    placed = Session.objects.filter(pk__in=[s.pk for s in sessions])
    assert {s.state for s in placed} == {SessionState.PLACED}
    assert {s.node_id for s in placed} == {node.pk}
    assert len({s.vnc_password for s in placed}) == 5  # each its own password
    assert all(s.placed_at and s.compute_units > 0 and s.queue_position is None for s in placed)
    assert all((s.reason_code, s.eta, s.blocked) == ("placed", None, False) for s in placed)
    holds = Allocation.objects.filter(session__in=placed, released_at=None)
    assert sorted(h.session_id for h in holds) == sorted(s.pk for s in sessions)
    assert len({h.slice_id for h in holds}) == 5
    for session in placed:
        [moved] = AuditEvent.objects.filter(
            session=session, kind=AuditKind.SESSION_TRANSITION, data__to="PLACED"
        )
        assert (moved.actor, moved.node_id, moved.data["from"]) == ("scheduler", node.pk, "QUEUED")
        [event] = AuditEvent.objects.filter(session=session, kind=AuditKind.SESSION_PLACED)
        [hold] = holds.filter(session=session)
        assert event.data == {"slices": [hold.slice_id], "nodes": [node.pk]}
    assert desired_version(node.pk) > before  # its agent is told


def test_the_queries_do_not_grow_with_the_placements(
    make_user, profile, register_node, monkeypatch
):
    counts = []
    together = placement_service.apply_placements

    def counted(placements, snapshot):
        with CaptureQueriesContext(connection) as queries:
            placed = together(placements, snapshot)
        counts.append((len(placements), placed, len(queries)))
        return placed

    monkeypatch.setattr("scheduling.services.cycle.apply_placements", counted)
    for size, host in ((2, "gpu-q"), (7, "gpu-r")):
        register_node(host, [gpu_inventory(f"GPU-{host}", 0, mig_slices=size)])
        submitted(make_user, profile, size, host)
        assert do_scheduling_cycle().placed == size  # (the first node is full: 7 on the next)
    assert [(n, placed) for n, placed, _ in counts] == [(2, 2), (7, 7)]
    assert counts[0][2] == counts[1][2], counts


def test_a_placement_that_raced_is_skipped_and_the_others_placed(
    make_user, profile, register_node, monkeypatch
):
    """Between the snapshot and the writes, one of the waiting students cancelled: the
    placements together fail, then each is applied alone and only that one is skipped."""
    register_node("gpu-s", [gpu_inventory("GPU-s", 0, mig_slices=3)])
    first, gone, last = submitted(make_user, profile, 3, "s")
    together = placement_service.apply_placements

    def cancelled_meanwhile(placements, snapshot):
        Session.objects.filter(pk=gone.pk).update(state=SessionState.CANCELLED)
        return together(placements, snapshot)

    monkeypatch.setattr("scheduling.services.cycle.apply_placements", cancelled_meanwhile)
    result = do_scheduling_cycle()

    assert (result.placed, result.conflicts) == (2, 1)
    states = dict(Session.objects.values_list("pk", "state"))
    assert states == {first.pk: "PLACED", gone.pk: "CANCELLED", last.pk: "PLACED"}
    assert not Allocation.objects.filter(session=gone).exists()
    assert not AuditEvent.objects.filter(session=gone, kind=AuditKind.SESSION_PLACED).exists()
