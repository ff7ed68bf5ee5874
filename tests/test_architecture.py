"""The structure rules of docs/architecture.md that import-linter does not check."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("people", "portal", "scheduling", "nodeagent", "bench")
MAX_LINES = 500
# Generated or tabular modules exempt from the size rule.
SIZE_EXEMPT = ("/migrations/", "/mig_tables/")
# Imports inside functions that are not hiding a cycle: a cipher only the image check needs,
# and Django's static-files handler, loaded only when DEBUG serves static files.
LATE_IMPORT_ALLOWED = {
    "portal/asgi.py": {"django.contrib.staticfiles.handlers"},
    # AppConfig.ready: Django's one place to connect signals once every model is loaded
    # (account_audit reads the user model, which apps.py may not import at load).
    "scheduling/apps.py": {"scheduling.services"},
    # The benchmark creates its own database and points DATABASE_URL at it before Django is set
    # up (bench.class_start sets Django up when imported): Django's imports come after that.
    "bench/portal_process.py": {
        "bench.class_start",
        "django.contrib.auth",
        "django.core.management",
        "django.db",
        "scheduling.choices",
        "scheduling.models",
    },
    "nodeagent/images/check_image.py": {
        "cryptography.hazmat.primitives.ciphers",
        "cryptography.hazmat.decrepit.ciphers.algorithms",
        "cryptography.hazmat.primitives.ciphers.algorithms",
    },
}


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def _late_imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found |= {alias.name for alias in inner.names}
            elif isinstance(inner, ast.ImportFrom):
                found.add("." * inner.level + (inner.module or ""))
    return found


def test_no_module_is_longer_than_a_sitting():
    long = {
        name: n
        for name, path in _modules()
        if not any(part in f"/{name}" for part in SIZE_EXEMPT)
        and (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_imports_are_at_the_top_unless_they_choose_a_backend():
    hidden = {}
    for name, path in _modules():
        late = _late_imports(ast.parse(path.read_text()))
        late -= LATE_IMPORT_ALLOWED.get(name, set())
        if late:
            hidden[name] = sorted(late)
    assert not hidden, f"imports inside functions (a hidden cycle?): {hidden}"


def test_row_locks_are_taken_in_one_module():
    outside = [
        name
        for name, path in _modules()
        if "select_for_update" in path.read_text() and name != "scheduling/locks.py"
    ]
    assert not outside, f"select_for_update outside scheduling/locks.py: {outside}"
