"""``python -m nodeagent.check_gpu [--json]``: what NVML sees here, or that it is absent."""

from __future__ import annotations

import argparse
import json
import sys

from nodeagent.probe.nvml import NvmlProbe, NvmlUnavailable
from nodeagent.protocol import GpuInventory, GpuMetrics, to_wire


def _cell(value: object) -> str:
    return "n/a" if value is None else str(value)


def _with(value: object, unit: str) -> str:
    return "n/a" if value is None else f"{value}{unit}"


def _link(gen: object, width: object) -> str:
    return f"gen {_cell(gen)} x{_cell(width)}".replace("xn/a", "width n/a")


def _live_line(m: GpuMetrics) -> str:
    """Power limit, fan, PCIe traffic, ECC and XID of one GPU; n/a where the card says nothing."""
    xids = m.xid_errors
    return (
        f"       limit {_with(m.power_limit_w, ' W')}, fan {_with(m.fan_pct, '%')}, "
        f"PCIe tx/rx {_cell(m.pcie_tx_kbps)}/{_cell(m.pcie_rx_kbps)} KB/s, "
        f"ECC corrected/uncorrected {_cell(m.ecc_corrected_volatile)}/"
        f"{_cell(m.ecc_uncorrected_volatile)}, "
        f"XID {'n/a (not watched)' if xids is None else (', '.join(map(str, xids)) or 'none')}"
    )


def _pcie_line(gpu: GpuInventory) -> str:
    now = _link(gpu.pcie_link_gen, gpu.pcie_link_width)
    best = _link(gpu.pcie_link_gen_max, gpu.pcie_link_width_max)
    return f"       PCIe link {now} now, {best} at most"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeagent.check_gpu")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        probe = NvmlProbe()
    except NvmlUnavailable as error:
        print(f"No NVML on this machine: {error}")
        print(
            "(No NVIDIA driver is loaded. Use a simulated fleet: python -m nodeagent --fleet FILE)"
        )
        return 1
    try:
        inventory, metrics = probe.inventory(), probe.metrics()
    finally:
        probe.close()
    if args.json:
        wire = {"gpus": [to_wire(g) for g in inventory], "metrics": [to_wire(m) for m in metrics]}
        print(json.dumps(wire, indent=2))
        return 0
    if not inventory:
        print("NVML is present but reports no GPUs.")
        return 0
    by_uuid = {m.uuid: m for m in metrics}
    print(
        f"{'idx':>3}  {'name':<26} {'memory':>9} {'cc':>4}  {'MIG':<4} {'util%':>6} "
        f"{'used MB':>8} {'temp C':>7} {'power W':>8}  uuid / pci"
    )
    for gpu in inventory:
        m = by_uuid.get(gpu.uuid)
        print(
            f"{gpu.index:>3}  {gpu.name[:26]:<26} {gpu.memory_mb:>6} MB "
            f"{gpu.compute_capability:>4}"
            f"  {'on' if gpu.mig_mode else 'off':<4} {_cell(m and m.utilization_pct):>6} "
            f"{_cell(m and m.memory_used_mb):>8} {_cell(m and m.temperature_c):>7} "
            f"{_cell(m and m.power_w):>8}  {gpu.uuid} {gpu.pci_bus_id}"
        )
        if m is not None:
            print(_live_line(m))
        print(_pcie_line(gpu))
        for instance in gpu.mig_instances:
            print(f"       MIG {instance.profile:<10} {instance.memory_mb:>6} MB  {instance.uuid}")
        if gpu.nvlink_peers:
            print(f"       NVLink peers: {', '.join(gpu.nvlink_peers)}")
    indices = {gpu.uuid: gpu.index for gpu in inventory}
    if len(inventory) > 1:
        print("PCIe topology (closest common ancestor of each pair):")
        for gpu in inventory:
            peers = gpu.pcie_topology or {}
            cells = [f"{indices.get(peer, peer)}:{level}" for peer, level in peers.items()]
            print(f"{gpu.index:>3}  {' '.join(cells) or 'n/a'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
