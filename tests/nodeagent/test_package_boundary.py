"""The node agent is standalone: importing all of it must not pull in Django, the portal or
the scheduler (import-linter checks the imports statically, this the modules really loaded;
module size, hidden imports and cycles: tests/test_architecture.py and lint-imports)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import nodeagent

PACKAGE = Path(nodeagent.__file__).parent


def agent_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages([str(PACKAGE)], prefix="nodeagent."))


def test_nodeagent_never_imports_django_the_portal_or_scheduling() -> None:
    modules = agent_modules()
    assert "nodeagent.outbox" in modules and "nodeagent.runtime.docker_warm" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in ('django', 'portal', 'scheduling')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
