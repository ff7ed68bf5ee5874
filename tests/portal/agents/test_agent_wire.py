"""Every field the agent sends reaches the portal's database, and is read back from it.

The messages are built the way the agent builds them (the simulated probe and agent, the
NVML probe on a fake NVML) and as fully populated model instances (every field of every
model set, none at its default: a guard checks it, so a field added to a model fails here
until the portal stores it). Each is sent over the agent API as the agent sends it, then
read back from the rows the portal stored and compared with what was sent: a field the
portal drops fails the comparison.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from pydantic import BaseModel
from rest_framework.test import APIClient

import nodeagent
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.portal_client import PortalClient
from nodeagent.probe.nvml import NvmlProbe
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from nodeagent.protocol import (
    PROTOCOL_VERSION,
    GpuHealth,
    GpuInventory,
    GpuMetrics,
    Heartbeat,
    MigInstance,
    Registration,
    SessionReport,
    SliceMetrics,
    WarmReport,
    to_wire,
)
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from people.models import Course
from scheduling.models import (
    AuditEvent,
    Booking,
    Gpu,
    JoinToken,
    Node,
    Session,
    SessionActivity,
    WarmDesktop,
    hash_token,
)
from scheduling.services.agent_sessions import placement_id
from scheduling.services.cycle import do_scheduling_cycle
from scheduling.services.nodes import do_create_join_token
from scheduling.services.sessions import check_submit, do_submit
from tests.nodeagent.test_probe_nvml import TwoGpus

pytestmark = pytest.mark.django_db

DEMO_FLEET = Path(nodeagent.__file__).parent / "fleets" / "demo.yaml"


def api(token: str | None = None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION="Node " + token)
    return client


def post(path: str, message: BaseModel, token: str | None = None) -> dict[str, Any]:
    """Send a message as the agent does (its wire JSON); the portal's answer."""
    answer = api(token).post(f"/api/agent/v1/{path}", to_wire(message), format="json")
    assert answer.status_code in (200, 201), answer.content
    return answer.json()


def assert_fully_populated(message: BaseModel) -> None:
    """Every field set (none left to its default), in nested messages too."""
    missing = set(type(message).model_fields) - message.model_fields_set
    assert not missing, f"{type(message).__name__} leaves {sorted(missing)} unset"
    for value in dict(message).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                assert_fully_populated(item)


# -- what the portal stored, in the shape of the messages ------------------------------------


def stored_gpu(gpu: Gpu) -> dict[str, Any]:
    mig = gpu.slices.filter(kind="mig", present=True).order_by("slot")
    return {
        "uuid": gpu.uuid,
        "index": gpu.index,
        "name": gpu.model,
        "memory_mb": gpu.memory_mb,
        "compute_capability": gpu.compute_capability,
        "mig_mode": gpu.mig_mode,
        "mig_instances": [
            {
                "uuid": s.device_uuid,
                "profile": s.profile,
                "memory_mb": s.memory_mb,
                "start": s.mig_start,
            }
            for s in mig
        ],
        "nvlink_peers": gpu.nvlink_peers,
        "pci_bus_id": gpu.pci_bus_id,
        "sharing": gpu.sharing,
        "share_count": gpu.share_count,
        "share_memory_mb": gpu.share_memory_mb,
        "simulated": gpu.simulated,
        "pcie_link_gen": gpu.pcie_link_gen,
        "pcie_link_width": gpu.pcie_link_width,
        "pcie_link_gen_max": gpu.pcie_link_gen_max,
        "pcie_link_width_max": gpu.pcie_link_width_max,
        "pcie_topology": gpu.pcie_topology,
    }


def stored_registration(node: Node, sent_join_token: str | None) -> dict[str, Any]:
    # The join token is stored as a digest, on the token the node used.
    used = JoinToken.objects.filter(used_by=node).values_list("token_hash", flat=True)
    join_token = sent_join_token if hash_token(sent_join_token or "") in used else None
    return {
        "protocol_version": node.protocol_version,
        "agent_version": node.agent_version,
        "hostname": node.hostname,
        "join_token": join_token,
        "address": node.address,
        "cpu_count": node.cpu_count,
        "memory_mb": node.memory_mb,
        "labels": node.labels,
        "runtime": node.runtime,
        "gpus": [stored_gpu(g) for g in node.gpus.filter(present=True).order_by("index")],
        "home_root_shared": node.home_root_shared,
        "gateway_port": node.gateway_port,
    }


def stored_heartbeat(node: Node) -> dict[str, Any]:
    stored = {
        "gpus": [g.metrics for g in node.gpus.filter(present=True).order_by("index")],
        "running_sessions": node.running_sessions,
    }
    # usage: the latest sample of each of the node's sessions, where there is one (recorded
    # for the node's own sessions only: tests/scheduling/test_idle_usage.py)
    activity = SessionActivity.objects.filter(session__node=node).order_by("session_id")
    if usage := [
        {"session_id": a.session_id, "gpu_pct": a.samples[-1][1], "cpu_pct": a.samples[-1][2]}
        for a in activity
        if a.samples
    ]:
        stored["usage"] = usage
    return stored


def register(registration: Registration) -> tuple[Node, str]:
    answer = post("register/", registration)
    node = Node.objects.get(pk=answer["node_id"])
    assert stored_registration(node, registration.join_token) == registration.model_dump(
        mode="json"
    )
    return node, answer["node_token"]


# -- registration and heartbeat ----------------------------------------------------------------


def full_gpu(uuid: str, index: int, peer: str) -> GpuInventory:
    return GpuInventory(
        uuid=uuid,
        index=index,
        name="NVIDIA A100-SXM4-80GB",
        memory_mb=81920,
        compute_capability="8.0",
        mig_mode=True,
        mig_instances=[
            MigInstance(uuid=f"MIG-{uuid}-0", profile="3g.40gb", memory_mb=40192, start=4),
            MigInstance(uuid=f"MIG-{uuid}-1", profile="1g.10gb", memory_mb=9984, start=0),
        ],
        nvlink_peers=[peer],
        pci_bus_id=f"00000000:{0x07 + index:02X}:00.0",
        sharing="mig",
        share_count=3,
        share_memory_mb=5000,
        simulated=False,
        pcie_link_gen=3 + index,
        pcie_link_width=8,
        pcie_link_gen_max=5,
        pcie_link_width_max=16,
        pcie_topology={peer: "single"},
    )


def full_metrics(uuid: str, index: int) -> GpuMetrics:
    return GpuMetrics(
        uuid=uuid,
        utilization_pct=12.5 + index,
        memory_used_mb=2048,
        temperature_c=44.0,
        power_w=180.5,
        power_limit_w=400.0,
        fan_pct=35.0,
        pcie_tx_kbps=123456,
        pcie_rx_kbps=789,
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=1,
        xid_errors=[79, 48],
        slices=[
            SliceMetrics(
                uuid=f"MIG-{uuid}-0", memory_used_mb=1024, utilization_pct=7.5, processes=2
            )
        ],
        share_health="",
        health=GpuHealth(
            lost=False, retired_pages_pending=False, row_remap_pending=False, row_remap_failed=False
        ),
    )


def test_a_fully_populated_registration_and_heartbeat_are_stored_field_by_field() -> None:
    join = do_create_join_token("gpu-full", actor="test")
    registration = Registration(
        protocol_version=PROTOCOL_VERSION,
        agent_version="9.9.9",
        hostname="gpu-full",
        join_token=join,
        address="10.1.2.3",
        cpu_count=96,
        memory_mb=1_000_000,
        labels={"rack": "r7", "cpu_model": "Xeon", "numa_nodes": "2"},
        runtime="docker",
        gpus=[full_gpu("GPU-f0", 0, "GPU-f1"), full_gpu("GPU-f1", 1, "GPU-f0")],
        home_root_shared=True,
        gateway_port=6090,
    )
    assert_fully_populated(registration)
    node, token = register(registration)

    heartbeat = Heartbeat(
        gpus=[full_metrics("GPU-f0", 0), full_metrics("GPU-f1", 1)],
        running_sessions=[5, 9],
        usage=[],  # sessions 5 and 9 do not exist: no usage to store
    )
    assert_fully_populated(heartbeat)
    post("heartbeat/", heartbeat, token)
    node.refresh_from_db()
    assert stored_heartbeat(node) == heartbeat.model_dump(mode="json", exclude={"usage"})


def simulated_agent(node: str, tmp_path: Path, join_token: str) -> Agent:
    config = AgentConfig(
        node_name=node, state_dir=tmp_path, fleet_file=DEMO_FLEET, runtime="simulated",
        join_token=join_token,
    )  # fmt: skip
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node(node), seed=1)
    runtime = SimulatedRuntime(node_name=node, start_delay_s=0.0)
    return Agent(config, client=PortalClient("http://unused"), probe=probe, runtime=runtime)


@pytest.mark.parametrize("node", ["gpu-a01", "gpu-a04", "gpu-t01"])  # MIG, NVLink, shares
def test_what_the_simulated_agent_sends_is_stored_field_by_field(node: str, tmp_path: Path) -> None:
    agent = simulated_agent(node, tmp_path, do_create_join_token(node, actor="test"))
    registration = agent.registration(agent.config.join_token)
    stored, token = register(registration)

    heartbeat = Heartbeat(gpus=agent.probe.metrics(), running_sessions=[])
    post("heartbeat/", heartbeat, token)
    stored.refresh_from_db()
    assert stored_heartbeat(stored) == to_wire(heartbeat)  # metrics as sent


def test_what_the_nvml_probe_sends_is_stored_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PCIe links (one unsupported: null) and the pair's topology from NVML."""
    TwoGpus(monkeypatch)
    probe = NvmlProbe()
    join = do_create_join_token("gpu-nvml", actor="test")
    registration = Registration(
        protocol_version=PROTOCOL_VERSION, agent_version="t", hostname="gpu-nvml",
        join_token=join, address="127.0.0.1", cpu_count=8, memory_mb=1000, labels={},
        runtime="docker", gpus=probe.inventory(),
    )  # fmt: skip
    node, token = register(registration)
    assert node.gpus.get(uuid="GPU-full").pcie_topology == {"GPU-bare": "hostbridge"}

    heartbeat = Heartbeat(gpus=probe.metrics(), running_sessions=[])
    post("heartbeat/", heartbeat, token)
    node.refresh_from_db()
    assert stored_heartbeat(node) == to_wire(heartbeat)
    probe.close()


# -- reports ---------------------------------------------------------------------------------


def stored_report(session: Session) -> dict[str, Any]:
    return {
        "state": session.state,
        "host": session.desktop_host,
        "port": session.desktop_port,
        "audio_port": session.desktop_audio_port,
        "container_id": session.container_id,
        "reason": session.reason_params.get("detail", "") if session.reason_code == "agent" else "",
        "placement": placement_id(session),
    }


def test_every_field_of_a_session_report_is_stored(owner, profile, register_node) -> None:
    _, token = register_node("gpu-r", [full_gpu("GPU-r", 0, "GPU-x").model_dump()])
    session = do_submit(owner, check_submit(owner, profile.pk, "hobby", None))
    do_scheduling_cycle()
    session.refresh_from_db()
    placement = placement_id(session)
    path = f"sessions/{session.pk}/report/"

    running = SessionReport(
        state="RUNNING", host="10.0.0.7", port=32001, audio_port=32002, container_id="c0ffee" * 8,
        reason="SIMULATED desktop: no container runs on this node", placement=placement,
    )  # fmt: skip
    # ``failure`` is a FAILED report's: the one at the end sets it.
    assert set(SessionReport.model_fields) - running.model_fields_set == {"failure"}
    post(path, running, token)
    session.refresh_from_db()
    # Every field but ``host``, which is deliberately not used: the session records the
    # node's registered address (where its gateway is reached), never one a report names
    # (docs/agent-protocol.md).
    expected = {
        **running.model_dump(mode="json", exclude={"failure"}),
        "host": session.node.address,
    }
    assert stored_report(session) == expected
    assert session.node.address != running.host

    lost = SessionReport(state="LOST", reason="desktop container is exited", placement=placement)
    post(path, lost, token)
    session.refresh_from_db()
    assert stored_report(session)["state"] == "LOST"
    assert stored_report(session)["reason"] == lost.reason

    # A FAILED report: its code is the session's cause, its words the audit event's detail.
    other = Session.objects.create(
        user=owner, profile=profile, purpose="hobby", state="PLACED", node=session.node
    )
    failed = SessionReport(
        state="FAILED", host="10.0.0.7", port=32002, audio_port=32003, container_id="dead" * 8,
        reason="image deskpool/x is not present on node gpu-r", placement="",
        failure="image_missing",
    )  # fmt: skip
    assert_fully_populated(failed)
    post(f"sessions/{other.pk}/report/", failed, token)
    other.refresh_from_db()
    assert (other.state, other.reason_params["cause"]) == ("FAILED", failed.failure)
    event = AuditEvent.objects.get(session_id=other.pk, data__to="FAILED")
    assert (event.data["detail"], event.data["cause"]) == (failed.reason, failed.failure)


def test_every_field_of_the_warm_reports_is_stored(owner, profile, register_node) -> None:
    _, token = register_node("gpu-w", [full_gpu("GPU-w", 0, "GPU-x").model_dump()])
    course = Course.objects.create(code="cs101", title="Intro", department="cs")
    start = timezone.now() + timedelta(minutes=5)
    Booking.objects.create(
        course=course, profile=profile, seats=2, starts_at=start, ends_at=start + timedelta(hours=2)
    )
    do_scheduling_cycle()
    first, second = api(token).get("/api/agent/v1/desired/").json()["warm"][:2]

    ready = WarmReport(state="READY", port=32100, container_id="feed" * 16)
    failed = WarmReport(state="FAILED", reason="image deskpool/x is not present on node gpu-w")
    # Between them the agent's two kinds of report set every field.
    assert ready.model_fields_set | failed.model_fields_set == set(WarmReport.model_fields)
    post(f"warm/{first['key']}/report/", ready, token)
    post(f"warm/{second['key']}/report/", failed, token)

    row = WarmDesktop.objects.get(key=first["key"])
    assert (row.state, row.port, row.container_id) == ("READY", ready.port, ready.container_id)
    row = WarmDesktop.objects.get(key=second["key"])
    assert (row.state, row.reason) == ("FAILED", failed.reason)
