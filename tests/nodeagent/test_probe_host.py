"""Host CPU and NUMA labels: fixture files of other machines, missing files, this host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.probe.host import (
    FLAGS_OF_INTEREST,
    HOST_LABEL_KEYS,
    cpu_labels,
    host_labels,
    merged_labels,
)

from .test_agent_loop import TinyPortal, make_agent

FIXTURES = Path(__file__).parent / "fixtures" / "host"


def fixture_host(name: str) -> dict[str, str]:
    return host_labels(FIXTURES / name / "proc", FIXTURES / name / "sys")


def test_dual_socket_xeon_reports_its_model_amx_and_two_numa_nodes() -> None:
    labels = fixture_host("xeon-2s")

    assert labels["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    flags = labels["cpu_flags"].split()
    assert flags == sorted(flags)
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"} <= set(flags)
    assert set(flags) <= FLAGS_OF_INTEREST  # not the hundred other words
    assert labels["numa_nodes"] == "2"
    assert labels["numa_cpus"] == "0=0-55,112-167;1=56-111,168-223"


def test_arm64_host_names_the_core_and_reports_sve() -> None:
    labels = fixture_host("grace")

    assert labels["cpu_model"] == "ARM Neoverse-V2"
    assert labels["cpu_flags"] == "aes asimd bf16 i8mm sve sve2"
    assert (labels["numa_nodes"], labels["numa_cpus"]) == ("1", "0=0-71")


def test_missing_files_leave_their_labels_out(tmp_path: Path) -> None:
    assert host_labels(tmp_path / "proc", tmp_path / "sys") == {}
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse\n")
    node = tmp_path / "sys" / "devices" / "system" / "node"
    (node / "node0").mkdir(parents=True)  # a node folder without a readable cpulist

    labels = host_labels(tmp_path / "proc", tmp_path / "sys")

    assert labels == {"cpu_flags": "", "numa_nodes": "1", "numa_cpus": "0="}


def test_cpuinfo_without_flags_or_model_gives_nothing() -> None:
    assert cpu_labels("") == {}
    assert cpu_labels("garbage without colons\n\n") == {}


def test_explicit_labels_win_over_host_labels() -> None:
    host = {"cpu_model": "AMD EPYC", "numa_nodes": "1"}
    assert merged_labels(host, {"rack": "r1", "numa_nodes": "2"}, {"rack": "r9"}) == {
        "cpu_model": "AMD EPYC",
        "numa_nodes": "2",
        "rack": "r9",
    }


def test_registration_merges_host_labels_under_fleet_and_env_labels(tmp_path: Path) -> None:
    agent = make_agent(TinyPortal(), tmp_path, labels={"rack": "r9"})
    agent.read_host_labels = lambda: {**fixture_host("xeon-2s"), "cooling": "host-says"}

    labels = agent.registration(join_token=None).labels

    # gpu-a01 in the demo fleet: rack r1, cooling liquid; DESKPOOL_LABELS said rack=r9.
    assert labels["rack"] == "r9"
    assert labels["cooling"] == "liquid"
    assert labels["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert labels["numa_nodes"] == "2"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo here")
def test_this_real_host() -> None:
    labels = host_labels()

    assert set(labels) <= set(HOST_LABEL_KEYS)
    assert labels["cpu_model"]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    for flag in labels["cpu_flags"].split():
        assert f" {flag}" in cpuinfo
    if Path("/sys/devices/system/node/node0").exists():
        nodes = int(labels["numa_nodes"])
        assert nodes >= 1 and labels["numa_cpus"].count("=") == nodes
        assert labels["numa_cpus"].startswith("0=")
        cpus = _count_cpus(labels["numa_cpus"])
        assert cpus == len(os.sched_getaffinity(0)) or cpus >= (os.cpu_count() or 1)


def _count_cpus(numa_cpus: str) -> int:
    total = 0
    for entry in numa_cpus.split(";"):
        for part in filter(None, entry.partition("=")[2].split(",")):
            low, _, high = part.partition("-")
            total += int(high or low) - int(low) + 1
    return total
