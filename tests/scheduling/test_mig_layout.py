"""MIG checked and watched on the real database (issue 37 items 2 and 3): a reported layout
the tables refuse offers no slice, says why and raises an alert; an accepted one offers its
instances again; the utilisation alert counts MIG GPUs from their instances; the idle sweep
never suspends a desktop whose MIG instance runs a CUDA process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.translation import override

from scheduling.choices import SessionState
from scheduling.models import Alert, AlertState, Allocation, Gpu, Session, Slice
from scheduling.services.agent_sessions import do_report
from scheduling.services.alerts import evaluate_alerts
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.idle import do_idle_sweep
from scheduling.services.mig_layout import describe, mig_utilisation
from scheduling.services.nodes import do_register
from scheduling.services.session_activity import record_usage
from scheduling.services.sessions import check_submit, do_submit
from tests.conftest import gpu_inventory, registration

A100 = "NVIDIA A100-SXM4-80GB"


def mig_gpu(uuid: str, instances: list[tuple[str, int | None]], name: str = A100) -> dict:
    gpu = gpu_inventory(uuid, 0, mig_slices=1)
    gpu["name"] = name
    gpu["mig_instances"] = [
        {"uuid": f"MIG-{uuid}-{i}", "profile": profile, "memory_mb": 9984}
        | ({} if start is None else {"start": start})
        for i, (profile, start) in enumerate(instances)
    ]
    return gpu


def offered(uuid: str) -> list[str]:
    return sorted(
        Slice.objects.filter(gpu__uuid=uuid, present=True).values_list("device_uuid", flat=True)
    )


def layout_alerts(uuid: str):
    return Alert.objects.filter(rule__name="MIG layout refused", subject=f"gpu:{uuid}")


@pytest.mark.django_db
def test_an_overlapping_layout_offers_no_slice_says_why_and_raises_an_alert(register_node):
    node, token = register_node("node-m", [mig_gpu("GPU-m", [("3g.40gb", 0), ("2g.20gb", 2)])])
    gpu = Gpu.objects.get(uuid="GPU-m")
    assert gpu.mig_layout_problem == {"code": "overlap", "profile": "2g.20gb", "start": 2}
    assert offered("GPU-m") == []
    with override("en"):
        assert describe(gpu.mig_layout_problem, gpu.model) == (
            "The 2g.20gb instance at memory slice 2 overlaps another."
        )
    evaluate_alerts(timezone.now())
    [alert] = layout_alerts("GPU-m")
    assert alert.state == AlertState.FIRING

    # The admin drains the node, sets a layout the tables allow; the agent re-registers.
    do_register(registration("node-m", [mig_gpu("GPU-m", [("3g.40gb", 0), ("2g.20gb", 4)])]), node)
    gpu.refresh_from_db()
    assert gpu.mig_layout_problem is None
    assert offered("GPU-m") == ["MIG-GPU-m-0", "MIG-GPU-m-1"]
    evaluate_alerts(timezone.now() + timedelta(minutes=1))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "instances", "code"),
    [
        ("NVIDIA H100 NVL", [("1g.12gb", None)], "unknown_model"),
        (A100, [("1c.3g.40gb", None)], "unknown_profile"),
        (A100, [("1g.10gb", None)] * 8, "too_many"),
    ],
)
def test_an_unknown_model_or_profile_or_too_many_instances_is_refused(
    register_node, name: str, instances: list[tuple[str, int | None]], code: str
):
    register_node("node-m", [mig_gpu("GPU-m", instances, name=name)])
    gpu = Gpu.objects.get(uuid="GPU-m")
    assert (gpu.mig_layout_problem or {}).get("code") == code
    assert offered("GPU-m") == []
    with override("en"):
        words = describe(gpu.mig_layout_problem, gpu.model)
    assert words and (name in words) == (code in ("unknown_model", "unknown_profile"))


@pytest.mark.django_db
def test_a_refusal_leaves_the_nodes_other_gpus_offered(register_node):
    register_node(
        "node-m",
        [mig_gpu("GPU-m", [("7g.80gb", None), ("1g.10gb", None)]), gpu_inventory("GPU-t", 1)],
    )
    assert Gpu.objects.get(uuid="GPU-m").mig_layout_problem == {
        "code": "no_room", "profile": "", "start": None
    }  # fmt: skip
    assert offered("GPU-m") == [] and offered("GPU-t") == ["GPU-t"]
    assert Gpu.objects.get(uuid="GPU-t").mig_layout_problem is None


def set_slices(uuid: str, readings: list[dict]) -> None:
    gpu = Gpu.objects.get(uuid=uuid)
    gpu.metrics = {"uuid": uuid, "utilization_pct": None, "slices": readings}
    gpu.save(update_fields=["metrics"])


@pytest.mark.django_db
def test_the_utilisation_alert_counts_a_mig_gpu_whose_instances_are_busy(pool):
    # pool: GPU-a and GPU-b are A100s with four 1g.10gb instances each (142/1000 of the GPU)
    set_slices("GPU-a", [{"uuid": f"MIG-GPU-a-{i}", "processes": 1} for i in range(4)])
    gpu = Gpu.objects.get(uuid="GPU-a")
    assert mig_utilisation(gpu, gpu.slices.filter(present=True)) == pytest.approx(56.8)
    # GPU-b as four quarters, each at 99% by DCGM: the GPU is 99% busy.
    Slice.objects.filter(gpu__uuid="GPU-b").update(milli=250)
    set_slices("GPU-b", [{"uuid": f"MIG-GPU-b-{i}", "utilization_pct": 99.0} for i in range(4)])
    start = timezone.now()
    for minute in range(31):
        evaluate_alerts(start + timedelta(minutes=minute))
    alerts = Alert.objects.filter(rule__name="GPU compute utilisation")
    assert list(alerts.values_list("subject", flat=True)) == ["gpu:GPU-b"]


@pytest.mark.django_db
def test_a_mig_gpu_without_instance_readings_has_no_utilisation(pool):
    set_slices("GPU-a", [{"uuid": "MIG-GPU-a-0", "memory_used_mb": 10}])  # an older agent
    gpu = Gpu.objects.get(uuid="GPU-a")
    assert mig_utilisation(gpu, gpu.slices.all()) is None
    set_slices("GPU-a", [{"uuid": "MIG-GPU-a-0", "processes": 0}])
    assert mig_utilisation(Gpu.objects.get(uuid="GPU-a"), gpu.slices.all()) == 0.0


def running_mig_desktop(owner, profile, register_node) -> Session:
    """A desktop on a node whose only GPU is one MIG instance, started 40 minutes ago."""
    node, _token = register_node("node-i", [gpu_inventory("GPU-i", 0, mig_slices=1)])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    do_report(node, session.pk, {"state": "RUNNING", "port": 32000})
    at = timezone.now() - timedelta(minutes=40)
    Session.objects.filter(pk=session.pk).update(started_at=at)
    return Session.objects.get(pk=session.pk)


@pytest.mark.django_db
@pytest.mark.lifecycle
def test_the_idle_sweep_never_suspends_a_mig_desktop_running_cuda(owner, profile, register_node):
    session = running_mig_desktop(owner, profile, register_node)
    [hold] = Allocation.objects.filter(session=session, released_at=None)
    assert hold.slice is not None and hold.slice.device_uuid == "MIG-GPU-i-0"
    now = timezone.now()
    # No input for 40 minutes; NVML gives no GPU figure on MIG; the CPU idles.
    record_usage(session.pk, None, 1.0, at=now)
    set_slices("GPU-i", [{"uuid": "MIG-GPU-i-0", "processes": 1, "memory_used_mb": 9000}])
    assert do_idle_sweep(now).warned == 0
    assert Session.objects.get(pk=session.pk).idle_state == "active"
    later = now + timedelta(minutes=30)
    record_usage(session.pk, None, 1.0, at=later)
    assert do_idle_sweep(later).suspended == 0
    assert Session.objects.get(pk=session.pk).state == SessionState.RUNNING

    # The training run ends: no CUDA process on the instance; the quiet desktop is warned.
    set_slices("GPU-i", [{"uuid": "MIG-GPU-i-0", "processes": 0, "memory_used_mb": 0}])
    end = later + timedelta(minutes=31)
    record_usage(session.pk, None, 1.0, at=end)
    assert do_idle_sweep(end).warned == 1
