"""The SIMULATED fleet probe and the demo fleet file."""

from __future__ import annotations

from pathlib import Path

import pytest

import nodeagent
from nodeagent.probe.simulated import FleetError, SimulatedProbe, load_fleet
from nodeagent.protocol import GpuMetrics, Heartbeat, to_wire

DEMO_FLEET = Path(nodeagent.__file__).parent / "fleets" / "demo.yaml"
INVENTORY_KEYS = {
    "uuid", "index", "name", "memory_mb", "compute_capability", "mig_mode",
    "mig_instances", "nvlink_peers", "pci_bus_id", "sharing", "simulated",
}  # fmt: skip
# The same keys as the NVML probe's metrics.
METRIC_KEYS = {
    "uuid", "utilization_pct", "memory_used_mb", "temperature_c", "power_w", "power_limit_w",
    "fan_pct", "pcie_tx_kbps", "pcie_rx_kbps", "ecc_corrected_volatile",
    "ecc_uncorrected_volatile", "xid_errors", "health",
}  # fmt: skip


def test_demo_fleet_file_says_it_is_simulated() -> None:
    first_line = DEMO_FLEET.read_text().splitlines()[0]
    assert "SIMULATED" in first_line


def test_demo_fleet_has_four_a100_nodes_and_one_t4_node() -> None:
    fleet = load_fleet(DEMO_FLEET)
    assert fleet.names() == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04", "gpu-t01"]


@pytest.mark.parametrize("node", ["gpu-a01", "gpu-a02", "gpu-a03"])
def test_a100_nodes_have_eight_mig_partitioned_gpus_linked_all_to_all(node: str) -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node(node))
    gpus = probe.inventory()
    assert len(gpus) == 8
    uuids = {gpu.uuid for gpu in gpus}
    for gpu in gpus:
        assert set(to_wire(gpu)) >= INVENTORY_KEYS
        assert gpu.simulated is True
        assert gpu.name == "NVIDIA A100-SXM4-80GB"
        assert (gpu.memory_mb, gpu.compute_capability) == (81920, "8.0")
        assert gpu.mig_mode is True and gpu.sharing == "mig"
        assert [m.profile for m in gpu.mig_instances] == [
            "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb",
        ]  # fmt: skip
        assert sum(m.memory_mb for m in gpu.mig_instances) <= gpu.memory_mb
        assert all(m.uuid.startswith("MIG-") for m in gpu.mig_instances)
        assert gpu.uuid.startswith("GPU-")
        assert set(gpu.nvlink_peers) == uuids - {gpu.uuid}
    facts = probe.node_facts()
    assert facts.labels["cooling"] == "liquid"
    assert facts.labels["network_plane"] == "ib0"
    assert facts.labels["rack"] in {"r1", "r2"}


def test_one_a100_node_offers_whole_gpus_on_nvlink_for_multi_gpu_work() -> None:
    gpus = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a04")).inventory()
    uuids = {gpu.uuid for gpu in gpus}
    assert len(gpus) == 8
    for gpu in gpus:
        assert gpu.sharing == "whole" and gpu.mig_mode is False and not gpu.mig_instances
        assert set(gpu.nvlink_peers) == uuids - {gpu.uuid}


def test_t4_node_offers_time_sliced_shares() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-t01"))
    gpus = probe.inventory()
    assert [gpu.name for gpu in gpus] == ["Tesla T4"] * 3
    for gpu in gpus:
        assert (gpu.memory_mb, gpu.compute_capability) == (15360, "7.5")
        assert gpu.sharing == "share" and gpu.mig_mode is False
        assert (gpu.share_count, gpu.share_memory_mb) == (4, 3840)
        assert gpu.mig_instances == [] and gpu.nvlink_peers == []
    assert probe.node_facts().labels == {"rack": "r3", "cooling": "air", "network_plane": "eth0"}


def test_uuids_are_unique_across_the_fleet_and_stable_across_loads() -> None:
    def all_uuids() -> list[str]:
        fleet = load_fleet(DEMO_FLEET)
        found = []
        for node in fleet.nodes:
            for gpu in SimulatedProbe(node).inventory():
                found.append(gpu.uuid)
                found.extend(m.uuid for m in gpu.mig_instances)
        return found

    first, second = all_uuids(), all_uuids()
    assert first == second
    assert len(set(first)) == len(first) == 3 * 8 * 5 + 8 + 3  # MIG nodes, whole node, T4s


def test_metrics_follow_running_sessions() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=1)
    gpus = probe.inventory()
    busy_gpu, idle_gpu = gpus[0], gpus[1]
    busy = [m.uuid for m in busy_gpu.mig_instances[:3]]  # three sessions on GPU 0
    for _ in range(10):  # temperatures approach their target over several heartbeats
        metrics = {m.uuid: m for m in probe.metrics(busy)}
    hot, cold = metrics[busy_gpu.uuid], metrics[idle_gpu.uuid]
    assert set(to_wire(hot)) == set(to_wire(cold)) == METRIC_KEYS | {"slices"}  # MIG GPUs
    assert hot.utilization_pct is not None and hot.utilization_pct > 80
    assert cold.utilization_pct is not None and cold.utilization_pct < 5
    assert (hot.memory_used_mb or 0) > (cold.memory_used_mb or 0) + 5000
    assert (hot.temperature_c or 0) > (cold.temperature_c or 0) + 20
    assert (hot.power_w or 0) > (cold.power_w or 0) + 200
    # The sessions end: the GPU cools down again.
    for _ in range(15):
        metrics = {m.uuid: m for m in probe.metrics([])}
    assert (metrics[busy_gpu.uuid].temperature_c or 99) < 34


def test_live_metrics_have_the_nvml_keys_and_follow_the_load() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a04"), seed=2)
    gpus = probe.inventory()
    busy = [gpus[0].uuid] * 3  # three sessions on the whole GPU 0
    for _ in range(10):
        metrics = {m.uuid: m for m in probe.metrics(busy)}
    hot, cold = metrics[gpus[0].uuid], metrics[gpus[1].uuid]
    for m in (hot, cold):
        assert set(to_wire(m)) == METRIC_KEYS
        assert m.power_limit_w == 400.0  # the fleet file's power_limit_w for the A100s
        assert (m.ecc_corrected_volatile, m.ecc_uncorrected_volatile) == (0, 0)
        assert m.xid_errors == []
        assert 0 <= (m.fan_pct or -1) <= 100
        assert (m.power_w or 0) <= (m.power_limit_w or 0)
    assert (hot.fan_pct or 0) > (cold.fan_pct or 0) + 30  # the fan follows the heat
    assert (hot.pcie_tx_kbps or 0) > (cold.pcie_tx_kbps or 0) + 1_000_000
    assert (hot.pcie_rx_kbps or 0) > (cold.pcie_rx_kbps or 0) + 100_000
    [t4, *_] = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-t01")).metrics()
    assert t4.power_limit_w == 70.0


def test_a_heartbeat_of_every_metric_key_passes_the_wire_model_as_sent() -> None:
    """The portal validates heartbeats with the same model (tests/portal/agents/test_agent_wire.py
    reads every field back from what it stored)."""
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=3)
    metrics = [to_wire(m) for m in probe.metrics()]
    metrics[0]["xid_errors"], metrics[1]["fan_pct"] = [79], None
    heartbeat = Heartbeat.model_validate({"gpus": metrics, "running_sessions": []})
    assert [to_wire(m) for m in heartbeat.gpus] == metrics
    # An older agent's metrics, without the optional keys, are still accepted as they are.
    old = [{key: m[key] for key in ("uuid", "utilization_pct", "memory_used_mb",
                                    "temperature_c", "power_w")} for m in metrics]  # fmt: skip
    assert [to_wire(GpuMetrics.model_validate(m)) for m in old] == old


def test_unknown_node_names_the_known_ones() -> None:
    with pytest.raises(FleetError, match="gpu-a01"):
        load_fleet(DEMO_FLEET).node("gpu-z99")


def test_malformed_fleet_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text("just: a mapping\n")
    with pytest.raises(FleetError, match="nodes"):
        load_fleet(bad)


def test_a_mig_gpu_sends_simulated_readings_per_instance() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=3)
    gpu = probe.inventory()[0]
    busy, idle = gpu.mig_instances[0], gpu.mig_instances[1]
    [metrics] = [m for m in probe.metrics([busy.uuid]) if m.uuid == gpu.uuid]
    slices = {s.uuid: s for s in metrics.slices or []}
    assert set(slices) == {m.uuid for m in gpu.mig_instances}
    assert (slices[busy.uuid].memory_used_mb or 0) >= 2048
    assert (slices[idle.uuid].memory_used_mb or 0) < 64
    assert (slices[busy.uuid].utilization_pct or 0) > (slices[idle.uuid].utilization_pct or 0)
    assert all((s.memory_used_mb or 0) <= m.memory_mb for s, m in zip(
        metrics.slices or [], gpu.mig_instances, strict=True))  # fmt: skip


def test_a_gpu_made_sick_reports_its_fault_and_its_xids_once() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=1)
    sick, well = (gpu.uuid for gpu in probe.inventory()[:2])
    probe.inject_fault(sick, xid_errors=[79], ecc_uncorrected_volatile=2, row_remap_failed=True)
    first = {m.uuid: m for m in probe.metrics()}
    assert first[sick].xid_errors == [79] and first[sick].ecc_uncorrected_volatile == 2
    assert first[sick].health is not None and first[sick].health.row_remap_failed
    assert first[well].xid_errors == [] and first[well].health is not None
    assert not first[well].health.row_remap_failed and not first[well].health.lost
    again = {m.uuid: m for m in probe.metrics()}
    assert again[sick].xid_errors == []  # an XID is an event: reported once
    assert again[sick].health is not None and again[sick].health.row_remap_failed


def test_an_unknown_fault_is_refused_in_plain_words() -> None:
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=1)
    with pytest.raises(FleetError, match="on_fire"):
        probe.inject_fault(probe.inventory()[0].uuid, on_fire=True)
