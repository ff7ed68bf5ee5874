"""Sick GPUs cordoned (scheduling.services.gpu_cordon) through the services an agent and an
admin use: a heartbeat with XID 79 cordons its GPU, the desktop on it is told, the "GPU
cordoned" alert names the cause, placement skips the GPU's free slices, and only an admin
uncordons or drains it, audited."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduling.choices import AuditKind, SessionState
from scheduling.engine.reasons import Code
from scheduling.models import Alert, AuditEvent, Gpu, Node, Session, Slice
from scheduling.services.agent_sessions import do_report
from scheduling.services.alerts import ensure_default_rules, evaluate_alerts
from scheduling.services.bookings import pool_records
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.gpu_cordon import do_uncordon_gpu
from scheduling.services.nodes import do_heartbeat
from scheduling.services.sessions import check_submit, do_submit

from ..conftest import gpu_inventory

pytestmark = pytest.mark.django_db

S = SessionState


def submit(user, profile) -> Session:
    return do_submit(user, check_submit(user, profile.pk, "hobby", None))


def reading(uuid: str, **extra) -> dict:
    """One GPU's heartbeat readings, well unless ``extra`` says otherwise."""
    return {
        "uuid": uuid, "utilization_pct": 5.0, "memory_used_mb": 100, "temperature_c": 40.0,
        "power_w": 60.0, "ecc_uncorrected_volatile": 0, "xid_errors": [],
        "health": {"lost": False}, **extra,
    }  # fmt: skip


def beat(node: Node, *readings: dict, running=()) -> None:
    do_heartbeat(
        Node.objects.get(pk=node.pk), {"gpus": list(readings), "running_sessions": list(running)}
    )


@pytest.fixture
def two_gpus(register_node):
    node, _token = register_node(
        "gpu-a01",
        [gpu_inventory("GPU-a", 0, mig_slices=2), gpu_inventory("GPU-b", 1, mig_slices=2)],
    )
    beat(node, reading("GPU-a"), reading("GPU-b"))
    return node


def gpu_of(session: Session) -> Gpu:
    allocation = session.allocations.get(released_at=None)
    return allocation.slice.gpu


def test_xid_79_cordons_the_gpu_tells_its_desktop_raises_the_alert_and_placement_skips_it(
    owner, admin_user, make_user, profile, two_gpus
):
    ensure_default_rules()
    first = submit(owner, profile)
    do_scheduling_cycle()
    do_report(two_gpus, first.pk, {"state": "RUNNING", "port": 32000})
    first.refresh_from_db()
    sick = gpu_of(first)
    well = Gpu.objects.exclude(pk=sick.pk).get(node=two_gpus)

    beat(two_gpus, reading(sick.uuid, xid_errors=[13, 79]), reading(well.uuid), running=[first.pk])

    sick.refresh_from_db()
    assert (sick.cordoned, sick.cordon_reason) == (True, "xid:79")
    assert sick.cordoned_at is not None
    well.refresh_from_db()
    assert not well.cordoned
    event = AuditEvent.objects.get(kind=AuditKind.GPU_CORDONED)
    assert (event.actor, event.node_id) == ("health", two_gpus.pk)
    assert event.data["causes"] == ["xid:79"] and event.data["gpu"] == sick.uuid
    first.refresh_from_db()
    assert first.state == S.RUNNING  # told, not stopped
    assert first.reason_code == Code.GPU_CORDONED
    assert first.reason_params == {"node": "gpu-a01", "gpu": sick.index}

    evaluate_alerts()
    alert = Alert.objects.get(rule__name="GPU cordoned", subject=f"gpu:{sick.uuid}")
    assert (alert.level, alert.detail) == ("critical", "xid:79")

    # the sick GPU's free slice takes nothing new; the well GPU's two do
    waiting = [submit(make_user(f"student{n}"), profile) for n in range(3)]
    do_scheduling_cycle()
    placed = [Session.objects.get(pk=s.pk) for s in waiting]
    on = [gpu_of(s).pk for s in placed if s.state == S.PLACED]
    assert on == [well.pk, well.pk]
    [left] = [s for s in placed if s.state == S.QUEUED]

    # the cordon holds whatever the GPU reports next (hysteresis): only an admin lifts it
    beat(two_gpus, reading(sick.uuid), reading(well.uuid), running=[first.pk])
    assert Gpu.objects.get(pk=sick.pk).cordoned

    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/console/pool/").content.decode()
    assert "Cordoned because: XID 79" in page
    assert f'data-cordon-actions="gpu-{sick.pk}"' in page
    answer = browser.post(
        f"/console/pool/gpus/{sick.pk}/", {"action": "uncordon", "reason": "card reseated"}
    )
    assert answer.status_code == 302
    sick.refresh_from_db()
    assert (sick.cordoned, sick.cordon_reason) == (False, "")
    cleared = AuditEvent.objects.get(kind=AuditKind.GPU_CORDON_CLEARED)
    assert cleared.actor == "user:root" and cleared.data["reason"] == "card reseated"
    assert cleared.data["before"]["cordon_reason"] == "xid:79"
    evaluate_alerts()
    alert.refresh_from_db()
    assert alert.state == "resolved"  # the alert lasts as long as the cordon
    do_scheduling_cycle()
    assert gpu_of(Session.objects.get(pk=left.pk)).pk == sick.pk


def test_a_lasting_sign_cordons_once_and_a_new_one_again(two_gpus, admin_user):
    beat(two_gpus, reading("GPU-a", ecc_uncorrected_volatile=2), reading("GPU-b"))
    gpu = Gpu.objects.get(uuid="GPU-a")
    assert (gpu.cordoned, gpu.cordon_reason) == (True, "ecc_uncorrected")
    assert do_uncordon_gpu(gpu, "user:root", "known, reset planned")
    beat(two_gpus, reading("GPU-a", ecc_uncorrected_volatile=2), reading("GPU-b"))
    assert not Gpu.objects.get(uuid="GPU-a").cordoned  # the admin knows of these two
    beat(
        two_gpus,
        reading(
            "GPU-a", ecc_uncorrected_volatile=3, health={"lost": False, "row_remap_failed": True}
        ),
        reading("GPU-b", health={"lost": True}),
    )
    a, b = Gpu.objects.get(uuid="GPU-a"), Gpu.objects.get(uuid="GPU-b")
    assert (a.cordoned, a.cordon_reason) == (True, "ecc_uncorrected,row_remap_failed")
    assert (b.cordoned, b.cordon_reason) == (True, "lost")


def test_an_admin_drains_a_sick_gpu_and_its_desktop_is_requeued(
    owner, admin_user, profile, two_gpus
):
    first = submit(owner, profile)
    do_scheduling_cycle()
    do_report(two_gpus, first.pk, {"state": "RUNNING", "port": 32000})
    sick = gpu_of(Session.objects.get(pk=first.pk))
    beat(
        two_gpus,
        reading(sick.uuid, xid_errors=[48]),
        reading("GPU-b" if sick.uuid == "GPU-a" else "GPU-a"),
    )

    browser = Client()
    browser.force_login(admin_user)
    answer = browser.post(f"/console/pool/gpus/{sick.pk}/", {"action": "drain", "reason": "RMA"})
    assert answer.status_code == 302
    first.refresh_from_db()
    assert (first.state, first.reason_code) == (S.QUEUED, Code.GPU_DRAINED_REQUEUED)
    drained = AuditEvent.objects.get(kind=AuditKind.GPU_DRAINED)
    assert drained.data["requeued"] == 1 and drained.actor == "user:root"
    assert Gpu.objects.get(pk=sick.pk).cordoned


def test_the_gpu_actions_check_who_asks_and_what_they_send(owner, admin_user, two_gpus):
    beat(two_gpus, reading("GPU-a", xid_errors=[79]), reading("GPU-b"))
    gpu = Gpu.objects.get(uuid="GPU-a")
    student = Client()
    student.force_login(owner)
    refused = student.post(f"/console/pool/gpus/{gpu.pk}/", {"action": "uncordon", "reason": "x"})
    assert refused.status_code == 404  # the console is hidden from non-admins
    assert Gpu.objects.get(pk=gpu.pk).cordoned

    browser = Client()
    browser.force_login(admin_user)
    for bad in ({"action": "explode", "reason": "x"}, {"action": "uncordon", "reason": "  "}):
        answer = browser.post(f"/console/pool/gpus/{gpu.pk}/", bad, follow=True)
        assert answer.status_code == 200
        assert Gpu.objects.get(pk=gpu.pk).cordoned
    assert browser.post("/console/pool/gpus/999999/", {"action": "uncordon"}).status_code == 404
    assert not AuditEvent.objects.filter(kind=AuditKind.GPU_CORDON_CLEARED).exists()


def test_a_node_cordoned_for_failed_starts_shows_why_and_uncordons_from_its_buttons(
    admin_user, two_gpus
):
    Node.objects.filter(pk=two_gpus.pk).update(cordoned=True, cordon_reason="start_failures")
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/console/pool/").content.decode()
    assert "Cordoned because: desktops failed to start on it 3 times within 10 minutes" in page
    assert f'data-cordon-actions="node-{two_gpus.pk}"' in page
    # what the node's Uncordon button sends: the node, the action and the reason typed
    fields = {"node": two_gpus.pk, "action": "uncordon", "reason": "image fixed"}
    assert browser.post("/console/pool/nodes/", fields).status_code == 302
    assert not Node.objects.get(pk=two_gpus.pk).cordoned
    cleared = AuditEvent.objects.get(kind=AuditKind.NODE_CORDON_CLEARED, node=two_gpus)
    assert cleared.data["reason"] == "image fixed"


def test_bookings_do_not_count_on_a_cordoned_gpus_slices(two_gpus):
    beat(two_gpus, reading("GPU-a", xid_errors=[95]), reading("GPU-b"))
    available = {s.slice_id: s.available for s in pool_records().slices}
    for slice_ in Slice.objects.filter(gpu__node=two_gpus):
        assert available[slice_.pk] is (slice_.gpu.uuid == "GPU-b")
