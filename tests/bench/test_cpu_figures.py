"""The CPU figures the benchmarks print (``bench.cpu``), read from this machine's /proc and
cgroups: each moves when what it counts happens, and a container that is not there has none."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import container_cpu_s, machine_busy_s, processes_started


def test_the_machine_busy_figure_counts_a_busy_second():
    before = machine_busy_s()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of this process's own CPU
        pass
    assert machine_busy_s() - before >= 0.25


def test_processes_started_counts_a_new_process():
    before = processes_started()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert processes_started() - before >= 1


def test_a_container_that_is_not_there_has_no_cpu_figure():
    assert container_cpu_s("0" * 64) is None
