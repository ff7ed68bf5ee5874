"""The node agent is standalone: importing all of it must not pull in Django."""

from __future__ import annotations

import subprocess
import sys


def test_nodeagent_never_imports_django() -> None:
    modules = [
        "nodeagent.__main__", "nodeagent.agent", "nodeagent.check_gpu", "nodeagent.reconcile",
        "nodeagent.runtime.docker_runtime", "nodeagent.runtime.simulated_runtime",
        "nodeagent.probe.nvml", "nodeagent.probe.simulated", "nodeagent.probe.host",
    ]  # fmt: skip
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
