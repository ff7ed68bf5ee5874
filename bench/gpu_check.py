"""A real-GPU check (issue 37 item 6): ``python -m bench.gpu_check`` on a machine with an NVIDIA
GPU and no Docker. It prints one table; each row ran, was skipped (and why) or failed (and why).

* the agent's NVML probe (nodeagent/probe/nvml.py): inventory and one metrics reading;
* MIG mode and instances, read only: nothing here changes MIG mode or the layout;
* a CUDA matmul with PyTorch where a CUDA build is importable (the CUDA wheels: ``pip install
  torch`` on Linux x86-64 from PyPI, or ``pip install torch --index-url
  https://download.pytorch.org/whl/cu124`` for a given CUDA version);
* where ``nvidia-cuda-mps-control`` exists: a private MPS control daemon (its own pipe folder
  under a temporary folder, stopped after) with a memory cap, and two clients: the first
  allocates within the cap, the second (without the cap in its own environment) is refused
  an allocation over it, as the agent's shares rely on (nodeagent/mps.py).

Without an NVIDIA driver every row says "skipped: no NVIDIA driver" and it exits 0. It exits
1 when a row failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.probe.nvml import NvmlProbe, NvmlUnavailable
from nodeagent.protocol import GpuInventory

try:  # optional: the CUDA matmul and the MPS clients need a CUDA build of PyTorch
    torch: Any = importlib.import_module("torch")
except ImportError:
    torch = None

MPS_CONTROL = "nvidia-cuda-mps-control"
NO_DRIVER = "no NVIDIA driver"
TORCH_HINT = (
    "PyTorch is not installed: pip install torch (Linux x86-64 wheels from PyPI are CUDA "
    "builds) or pip install torch --index-url https://download.pytorch.org/whl/cu124"
)
_CLIENT_TIMEOUT_S = 120.0
_MIB = 1024 * 1024
# One MPS client: allocate MB megabytes on the GPU and say whether it worked; with HOLD it
# keeps the memory until its stdin closes (so that both clients are on the GPU at once).
_CLIENT = """
import sys, torch
mb, hold = int(sys.argv[1]), sys.argv[2] == "hold"
try:
    block = torch.empty(mb * 1024 * 1024, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
except Exception as error:  # torch.cuda.OutOfMemoryError, or a CUDA error under MPS
    print("refused", type(error).__name__, str(error).splitlines()[0][:120], flush=True)
    sys.exit(0)
print("allocated", mb, flush=True)
if hold:
    sys.stdin.read()
"""


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    check: str
    status: str  # "ran", "skipped", "failed"
    detail: str

    def line(self, width: int) -> str:
        status = self.status if self.status == "ran" else f"{self.status}: {self.detail}"
        detail = self.detail if self.status == "ran" else ""
        return f"{self.check:<{width}}  {status}{'  ' + detail if detail else ''}"


class Skipped(Exception):
    """The check cannot run here; the message says why."""


class Failed(Exception):
    """The check ran and found something wrong; the message says what."""


def run_check(name: str, check: Callable[[], str]) -> Row:
    try:
        return Row(name, "ran", check())
    except Skipped as why:
        return Row(name, "skipped", str(why))
    except Failed as what:
        return Row(name, "failed", str(what))
    except Exception as error:  # a check must never take the table down with it
        return Row(name, "failed", f"{type(error).__name__}: {error}")


# -- NVML -----------------------------------------------------------------------------------


def open_probe() -> tuple[NvmlProbe | None, str]:
    try:
        return NvmlProbe(), ""
    except NvmlUnavailable as error:
        return None, f"{NO_DRIVER} ({error})"


def inventory_text(gpus: list[GpuInventory]) -> str:
    if not gpus:
        raise Failed("NVML answers but lists no GPU")
    return "; ".join(
        f"GPU {g.index} {g.name} {g.memory_mb} MB cc {g.compute_capability or '?'} "
        f"PCIe gen {g.pcie_link_gen}/{g.pcie_link_gen_max} x{g.pcie_link_width}"
        for g in gpus
    )


def metrics_text(probe: NvmlProbe) -> str:
    readings = probe.metrics()
    return "; ".join(
        f"{m.uuid[:12]}… util {m.utilization_pct}% mem {m.memory_used_mb} MB "
        f"{m.temperature_c} °C {m.power_w} W / {m.power_limit_w} W "
        f"ECC uncorrected {m.ecc_uncorrected_volatile} XID {m.xid_errors}"
        for m in readings
    )


def mig_text(gpus: list[GpuInventory]) -> str:
    """MIG mode and the instances as NVML lists them (read only)."""
    parts = []
    for g in gpus:
        if not g.mig_mode:
            parts.append(f"GPU {g.index}: MIG off")
            continue
        profiles = ", ".join(f"{m.profile} ({m.memory_mb} MB)" for m in g.mig_instances)
        parts.append(f"GPU {g.index}: MIG on, {len(g.mig_instances)} instances: {profiles}")
    return "; ".join(parts) + " (nothing changed)"


# -- CUDA -----------------------------------------------------------------------------------


def require_cuda_torch() -> Any:
    if torch is None:
        raise Skipped(TORCH_HINT)
    if torch.version.cuda is None:
        raise Skipped(f"PyTorch {torch.__version__} is a CPU build: {TORCH_HINT}")
    if not torch.cuda.is_available():
        raise Failed(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
    return torch


def matmul_text(size: int = 8192) -> str:
    cuda = require_cuda_torch()
    a = cuda.randn(size, size, device="cuda", dtype=cuda.float16)
    b = cuda.randn(size, size, device="cuda", dtype=cuda.float16)
    (a @ b).sum().item()  # warm up (kernels, cuBLAS handle)
    cuda.cuda.synchronize()
    rounds = 10
    start = time.perf_counter()
    for _ in range(rounds):
        c = a @ b
    cuda.cuda.synchronize()
    elapsed = time.perf_counter() - start
    # The result checked on a corner against float32 on the GPU, not only timed.
    want = a[:64].float() @ b[:, :64].float()
    error = (c[:64, :64].float() - want).abs().max().item() / max(1.0, want.abs().max().item())
    if error > 0.05:
        raise Failed(f"the product is wrong: relative error {error:.3f}")
    tflops = 2 * size**3 * rounds / elapsed / 1e12
    return (
        f"{cuda.cuda.get_device_name(0)}: {size}×{size} fp16 ×{rounds} in {elapsed:.3f} s "
        f"= {tflops:.1f} TFLOP/s (torch {cuda.__version__}, CUDA {cuda.version.cuda})"
    )


# -- MPS ------------------------------------------------------------------------------------


@contextmanager
def private_daemon(gpu_uuid: str, folder: Path) -> Iterator[dict[str, str]]:
    """A control daemon of our own (its own pipe folder) for one GPU; quit afterwards."""
    pipe, log = folder / "pipe", folder / "log"
    pipe.mkdir()
    log.mkdir()
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": gpu_uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(log),
    }
    started = subprocess.run(
        [MPS_CONTROL, "-d"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if started.returncode != 0:
        raise Failed(f"{MPS_CONTROL} -d: {started.stderr.strip() or started.returncode}")
    try:
        yield env
    finally:
        subprocess.run(
            [MPS_CONTROL], input="quit\n", env=env, capture_output=True, timeout=30, check=False
        )


def control(env: dict[str, str], command: str) -> str:
    answer = subprocess.run(
        [MPS_CONTROL], input=command + "\n", env=env, capture_output=True, text=True, timeout=30
    )
    return f"{answer.stdout} {answer.stderr}".strip()


def client_env(env: dict[str, str], limit: str | None) -> dict[str, str]:
    """A client: the daemon's pipe folder, its GPU as device 0, and maybe its own limit."""
    mine = {k: v for k, v in env.items() if k != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}
    mine.pop("CUDA_VISIBLE_DEVICES", None)  # the server remaps: the client sees device 0
    if limit is not None:
        mine["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = limit
    return mine


def one_client(env: dict[str, str], mb: int) -> str:
    answer = subprocess.run(
        [sys.executable, "-c", _CLIENT, str(mb), "once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=_CLIENT_TIMEOUT_S,
    )
    return (answer.stdout.strip() or answer.stderr.strip()[-200:]) or f"exit {answer.returncode}"


def first_line(client: subprocess.Popen[str]) -> str:
    """The holding client's answer, or why none came within the bound."""
    assert client.stdout is not None
    ready, _, _ = select.select([client.stdout], [], [], _CLIENT_TIMEOUT_S)
    if not ready:
        client.kill()
        return f"no answer within {_CLIENT_TIMEOUT_S:.0f} s"
    return client.stdout.readline().strip() or f"exit {client.wait()}"


def mps_text(gpus: list[GpuInventory], cap_mb: int) -> str:
    if shutil.which(MPS_CONTROL) is None:
        raise Skipped(f"{MPS_CONTROL} is not installed (NVIDIA driver compute utilities)")
    require_cuda_torch()
    whole = [g for g in gpus if not g.mig_mode]
    if not whole:
        raise Skipped("every GPU is in MIG mode (MIG is not changed here)")
    gpu = whole[0]
    with (
        tempfile.TemporaryDirectory(prefix="deskpool-mps-") as folder,
        private_daemon(gpu.uuid, Path(folder)) as env,
    ):
        said = control(env, f"set_default_device_pinned_mem_limit 0 {cap_mb}M")
        if "error" in said.lower():
            raise Failed(f"the daemon refused the cap: {said}")
        first = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, str(cap_mb // 4), "hold"],
            env=client_env(env, f"0={cap_mb}M"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            held = first_line(first)
            # The second client sets no limit of its own: the daemon's default caps it.
            over = one_client(client_env(env, None), cap_mb * 2)
            # And one that asks for a higher limit itself: does the daemon's hold?
            raised = one_client(client_env(env, f"0={cap_mb * 4}M"), cap_mb * 2)
            servers = control(env, "get_server_list")
        finally:
            first.communicate(input="", timeout=_CLIENT_TIMEOUT_S)
    detail = (
        f"GPU {gpu.index}, cap {cap_mb} MB; client 1 ({cap_mb // 4} MB): {held}; client 2 "
        f"({cap_mb * 2} MB, no limit of its own): {over}; a client raising its own limit to "
        f"{cap_mb * 4} MB ({cap_mb * 2} MB): {raised}; MPS servers: {servers or 'none'}"
    )
    if not held.startswith("allocated"):
        raise Failed(f"the first client could not allocate within the cap: {detail}")
    if not over.startswith("refused"):
        raise Failed(f"the over-cap allocation was NOT refused: {detail}")
    return detail


# -- the table ------------------------------------------------------------------------------


def checks(cap_mb: int) -> list[Row]:
    probe, why = open_probe()
    if probe is None:
        names = ("NVML probe: inventory", "NVML probe: metrics", "MIG mode and instances")
        rows = [Row(name, "skipped", why) for name in names]
        rows.append(Row("CUDA matmul (PyTorch)", "skipped", NO_DRIVER))
        rows.append(Row("MPS: two clients, memory cap", "skipped", NO_DRIVER))
        return rows
    try:
        gpus: list[GpuInventory] = []

        def inventory() -> str:
            gpus.extend(probe.inventory())
            return inventory_text(gpus)

        return [
            run_check("NVML probe: inventory", inventory),
            run_check("NVML probe: metrics", lambda: metrics_text(probe)),
            run_check("MIG mode and instances", lambda: mig_text(gpus)),
            run_check("CUDA matmul (PyTorch)", matmul_text),
            run_check("MPS: two clients, memory cap", lambda: mps_text(gpus, cap_mb)),
        ]
    finally:
        probe.close()


def table(rows: list[Row]) -> str:
    width = max(len(row.check) for row in rows)
    return "\n".join(row.line(width) for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument(
        "--mps-cap-mb", type=int, default=2048, help="the MPS clients' memory cap (MB)"
    )
    args = parser.parse_args(argv)
    if args.mps_cap_mb < 64:
        parser.error("--mps-cap-mb must be at least 64")
    rows = checks(args.mps_cap_mb)
    print(table(rows))
    if all(row.status == "skipped" and NO_DRIVER in row.detail for row in rows):
        print(f"\n{NO_DRIVER} on this machine: nothing was checked on a GPU.")
    return 1 if any(row.status == "failed" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
