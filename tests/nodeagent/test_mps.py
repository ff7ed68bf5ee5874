"""GPU shares through CUDA MPS, without a GPU: a fake NVML and a fake nvidia-cuda-mps-control.

The fake control program (fixtures/fake_mps_control.py) is put on PATH under the real name;
it records every call (arguments, CUDA_* environment, commands on stdin) and, with -d, leaves
a sleeping process behind as the daemon, its pid in the pipe directory as the real one does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nodeagent.config import AgentConfig, ConfigError, GpuShares, parse_gpu_shares
from nodeagent.mps import CLIENT_PIPE_DIRECTORY, PID_FILE, MpsSupervisor, MpsUnavailable
from nodeagent.probe import NodeFacts, make_probe
from nodeagent.probe.nvml import NvmlProbe
from nodeagent.probe.shares import SharingProbe
from tests.nodeagent.test_probe_nvml import TwoGpus, wire

FAKE = Path(__file__).parent / "fixtures" / "fake_mps_control.py"
PROGRAM = "nvidia-cuda-mps-control"


class FakeMps:
    """The fake control program on PATH, and what it was asked."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        program = bin_dir / PROGRAM
        program.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        program.chmod(0o755)
        self.record = tmp_path / "calls.jsonl"
        self.root = tmp_path / "state" / "mps" / "node-a"
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_MPS_RECORD", str(self.record))

    def calls(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def starts(self) -> list[dict[str, Any]]:
        return [call for call in self.calls() if call["argv"] == ["-d"]]

    def daemon_pid(self, uuid: str) -> int:
        return int((self.root / uuid / "pipe" / PID_FILE).read_text())

    def kill_all(self) -> None:
        for pid_file in self.root.glob(f"*/pipe/{PID_FILE}"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)

    def kill(self, uuid: str) -> int:
        """End a daemon as a crash would, and wait until it is gone."""
        pid = self.daemon_pid(uuid)
        os.kill(pid, signal.SIGKILL)
        for _ in range(1000):  # a zombie (nobody reaps it here) has an empty command line
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes():
                    time.sleep(0.01)
                    continue
            break
        return pid


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> TwoGpus:
    """Two H100s, neither in MIG mode (test_probe_nvml's fake NVML)."""
    return TwoGpus(monkeypatch)


@pytest.fixture
def fake_mps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMps]:
    fake = FakeMps(tmp_path, monkeypatch)
    yield fake
    fake.kill_all()


def _supervisor(fake: FakeMps) -> MpsSupervisor:
    """Without the private shm (a mount namespace and a tmpfs: root only; tested apart)."""
    return MpsSupervisor(fake.root, PROGRAM, private_shm=False)


FOUR = GpuShares(count=4, memory_mb=10240)


# -- configuration -----------------------------------------------------------------------


def test_shares_are_read_by_uuid_index_or_all() -> None:
    assert parse_gpu_shares("all=4x10240") == {"all": FOUR}
    assert parse_gpu_shares("GPU-full=4x10240, 1=2X20000") == {
        "GPU-full": FOUR,
        "1": GpuShares(count=2, memory_mb=20000),
    }
    config = AgentConfig.from_env(
        {"DESKPOOL_GPU_SHARES": "0=3x100", "DESKPOOL_MPS_CONTROL": " /opt/nv/mps-control "}
    )
    assert config.gpu_shares == {"0": GpuShares(3, 100)}
    assert config.mps_control == "/opt/nv/mps-control"
    assert AgentConfig.from_env({}).gpu_shares == {}  # unset: whole GPUs, no supervisor
    assert GpuShares(3, 100).thread_percentage == 33
    assert GpuShares(64, 100).thread_percentage == 2


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("4x10240", "look like GPU=NxMB"),
        ("all=4", "look like GPU=NxMB"),
        ("all=0x100", "1 to 64 shares"),
        ("all=65x100", "1 to 64 shares"),
        ("all=2x0", "1 to 64 shares"),
        ("0=2x10,0=3x10", "twice"),
        ("all=2x10,1=2x10", "twice"),
    ],
)
def test_unusable_shares_are_refused_with_the_variable_named(value: str, words: str) -> None:
    with pytest.raises(ConfigError, match="DESKPOOL_GPU_SHARES") as refused:
        parse_gpu_shares(value)
    assert words in str(refused.value)


# -- the supervisor ----------------------------------------------------------------------


def test_one_capped_daemon_per_shared_gpu_with_its_own_folders(fake_mps: FakeMps) -> None:
    mps = _supervisor(fake_mps)

    health = mps.ensure({"GPU-a": FOUR, "GPU-b": GpuShares(2, 20000)})

    assert {uuid: h.ok for uuid, h in health.items()} == {"GPU-a": True, "GPU-b": True}
    starts = fake_mps.starts()
    assert [call["env"] for call in starts] == [
        {
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(fake_mps.root / uuid / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(fake_mps.root / uuid / "log"),
        }
        for uuid in ("GPU-a", "GPU-b")
    ]
    # Then each daemon's defaults: every client capped, whatever its own environment says.
    commands = [call for call in fake_mps.calls() if call["argv"] == []]
    assert [(c["env"]["CUDA_VISIBLE_DEVICES"], c["stdin"]) for c in commands] == [
        ("GPU-a", "set_default_device_pinned_mem_limit 0 10240M\n"
                  "set_default_active_thread_percentage 25\n"),
        ("GPU-b", "set_default_device_pinned_mem_limit 0 20000M\n"
                  "set_default_active_thread_percentage 50\n"),
    ]  # fmt: skip
    assert fake_mps.daemon_pid("GPU-a") != fake_mps.daemon_pid("GPU-b")
    assert (fake_mps.root / "GPU-a" / "pipe").stat().st_mode & 0o777 == 0o700
    assert health["GPU-a"].text() == "MPS running: 4 shares of 10240 MB, 25% of the SMs each"
    # A second look finds them running: nothing is started again.
    mps.check()
    assert len(fake_mps.starts()) == 2


def test_a_dead_daemon_is_started_again_and_counted(fake_mps: FakeMps) -> None:
    mps = _supervisor(fake_mps)
    mps.ensure({"GPU-a": FOUR})
    first = fake_mps.kill("GPU-a")

    health = mps.check()

    assert len(fake_mps.starts()) == 2
    assert fake_mps.daemon_pid("GPU-a") != first
    assert health["GPU-a"].ok and health["GPU-a"].restarts == 1
    assert health["GPU-a"].text().endswith("restarted 1×")


def test_each_look_sets_a_running_daemons_caps_again(
    fake_mps: FakeMps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client reaches the control socket and may change the defaults: the agent sets them
    # again at every heartbeat; a daemon that refuses them is asked to quit, no share offered.
    mps = _supervisor(fake_mps)
    mps.ensure({"GPU-a": FOUR})
    mps.check()
    caps = [call["stdin"] for call in fake_mps.calls() if call["argv"] == []]
    assert len(caps) == 2 and caps[0] == caps[1]
    monkeypatch.setenv("FAKE_MPS_REFUSE", "1")
    [health] = mps.check().values()
    assert not health.ok and "caps were refused" in health.reason
    assert fake_mps.calls()[-1]["stdin"] == "quit\n"


def test_a_daemon_found_running_is_adopted_with_its_caps_set_again(fake_mps: FakeMps) -> None:
    _supervisor(fake_mps).ensure({"GPU-a": FOUR})  # an earlier agent's
    again = _supervisor(fake_mps)

    health = again.ensure({"GPU-a": FOUR})

    assert health["GPU-a"].ok and health["GPU-a"].restarts == 0
    assert len(fake_mps.starts()) == 1
    caps = [call for call in fake_mps.calls() if call["argv"] == []]
    assert len(caps) == 2 and caps[0]["stdin"] == caps[1]["stdin"]


def test_a_daemon_that_cannot_start_gives_no_share(
    fake_mps: FakeMps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    mps = _supervisor(fake_mps)
    [health] = mps.ensure({"GPU-a": FOUR}).values()
    assert not health.ok
    assert "already running" in health.reason
    mps.offer(["GPU-a"])
    with pytest.raises(MpsUnavailable, match="no desktop gets an uncapped share"):
        mps.client_of(["GPU-a"])


def test_refused_caps_stop_the_daemon_and_give_no_share(
    fake_mps: FakeMps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_REFUSE", "1")
    [health] = _supervisor(fake_mps).ensure({"GPU-a": FOUR}).values()
    assert not health.ok and "caps were refused" in health.reason


def test_without_the_control_program_mps_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    mps = MpsSupervisor(tmp_path / "mps", PROGRAM, private_shm=False)
    [health] = mps.ensure({"GPU-a": FOUR}).values()
    assert not health.ok
    assert health.reason.startswith(f"MPS is not available: {PROGRAM} is not installed")


def test_a_share_client_gets_the_pipe_folder_and_the_caps(fake_mps: FakeMps) -> None:
    mps = _supervisor(fake_mps)
    mps.ensure({"GPU-a": FOUR})
    mps.offer(["GPU-a"])

    share = mps.client_of(["GPU-a"])

    assert share is not None and share.pipe_dir == fake_mps.root / "GPU-a" / "pipe"
    assert share.shm_dir == fake_mps.root / "GPU-a" / "shm"
    assert share.environment == {
        "CUDA_MPS_PIPE_DIRECTORY": CLIENT_PIPE_DIRECTORY,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    assert mps.client_of(["GPU-other"]) is None  # a whole GPU: no MPS
    assert mps.client_of([]) is None
    # A daemon that died since the last heartbeat is started before the desktop is.
    fake_mps.kill("GPU-a")
    assert mps.client_of(["GPU-a"]) is not None
    assert len(fake_mps.starts()) == 2


ROOT_AND_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None


@pytest.mark.skipif(not ROOT_AND_UNSHARE, reason="a mount namespace and a tmpfs need root")
def test_the_daemon_sees_the_gpus_shm_tmpfs_as_its_dev_shm(fake_mps: FakeMps) -> None:
    mps = MpsSupervisor(fake_mps.root, PROGRAM, private_shm=True)
    shm = fake_mps.root / "GPU-a" / "shm"
    try:
        [health] = mps.ensure({"GPU-a": GpuShares(2, 100)}).values()
        assert health.ok, health.reason
        assert os.path.ismount(shm)
        [start] = fake_mps.starts()
        seen = os.stat(shm)
        # In its own mount namespace the daemon's /dev/shm is the GPU's tmpfs; ours is not.
        assert start["shm"] == [seen.st_dev, seen.st_ino]
        assert [os.stat("/dev/shm").st_dev, os.stat("/dev/shm").st_ino] != start["shm"]
        with open("/proc/mounts") as mounts:
            [line] = [m for m in mounts if f" {shm} " in m]
        assert line.startswith("tmpfs ") and "size=2097152k" in line  # 2 shares of 1024 MB
    finally:
        fake_mps.kill_all()
        subprocess.run(["umount", str(shm)], check=False)


# -- the probe ---------------------------------------------------------------------------


def _sharing(nvml: TwoGpus, mps: MpsSupervisor, shares: dict[str, GpuShares]) -> SharingProbe:
    return SharingProbe(NvmlProbe(facts=NodeFacts(cpu_count=8, memory_mb=1000)), shares, mps)


def test_the_probe_reports_share_mode_where_mps_runs(nvml: TwoGpus, fake_mps: FakeMps) -> None:
    mps = _supervisor(fake_mps)
    probe = _sharing(nvml, mps, {"GPU-full": FOUR})

    full, bare = wire(probe.inventory())

    assert (full["sharing"], full["share_count"], full["share_memory_mb"]) == ("share", 4, 10240)
    assert bare["sharing"] == "whole" and "share_count" not in bare
    assert mps.offered == {"GPU-full"}
    [call] = fake_mps.starts()
    assert call["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-full"
    full_now, bare_now = wire(probe.metrics())
    assert full_now["share_health"].startswith("MPS running: 4 shares")
    assert "share_health" not in bare_now
    probe.close()


def test_all_gpus_by_index_and_too_many_megabytes_offer_whole(
    nvml: TwoGpus, fake_mps: FakeMps
) -> None:
    # 81559 MB each: 2 x 40000 fits, 4 x 40000 does not (that GPU is offered whole).
    probe = _sharing(nvml, _supervisor(fake_mps), {"all": GpuShares(2, 40000)})
    assert [g["sharing"] for g in wire(probe.inventory())] == ["share", "share"]
    probe = _sharing(nvml, _supervisor(fake_mps), {"1": GpuShares(4, 40000)})
    assert [g["sharing"] for g in wire(probe.inventory())] == ["whole", "whole"]


def test_without_mps_the_gpus_are_whole_and_the_heartbeat_says_why(
    nvml: TwoGpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    mps = MpsSupervisor(tmp_path / "mps", PROGRAM, private_shm=False)
    probe = _sharing(nvml, mps, {"all": FOUR})

    assert [g["sharing"] for g in wire(probe.inventory())] == ["whole", "whole"]
    assert mps.offered == frozenset()
    assert mps.client_of(["GPU-full"]) is None  # offered whole: a whole GPU's desktop
    for reading in wire(probe.metrics()):
        assert "is not installed" in reading["share_health"]
        assert "GPUs are offered whole" in reading["share_health"]


def test_a_gpu_in_mig_mode_keeps_its_instances(
    nvml: TwoGpus, fake_mps: FakeMps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        pynvml, "nvmlDeviceGetMigMode", lambda h: (pynvml.NVML_DEVICE_MIG_ENABLE, 1)
    )
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 0)
    probe = _sharing(nvml, _supervisor(fake_mps), {"all": FOUR})
    assert [g["sharing"] for g in wire(probe.inventory())] == ["mig", "mig"]
    assert fake_mps.starts() == []


def test_make_probe_shares_only_with_a_supervisor(
    nvml: TwoGpus, fake_mps: FakeMps, tmp_path: Path
) -> None:
    config = AgentConfig(node_name="node-a", state_dir=tmp_path / "state", gpu_shares={"0": FOUR})
    mps = MpsSupervisor.from_config(config)
    assert mps is not None and mps.root == fake_mps.root
    assert isinstance(make_probe(config, mps), SharingProbe)
    assert MpsSupervisor.from_config(AgentConfig(node_name="node-a")) is None
    assert isinstance(make_probe(config), NvmlProbe)
