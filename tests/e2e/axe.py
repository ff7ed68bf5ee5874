"""Accessibility check for the browser tests: axe-core run on a Playwright page.

axe-core's ``axe.min.js`` (MPL-2.0, Deque Systems) comes from the ``axe-playwright-python``
package of the dev extras, so nothing is downloaded at test time. Only the script is used:
it is evaluated in the page (as a DevTools evaluation, not a page script, so the page's own
policies do not block it) and ``axe.run`` checks the whole document.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from pathlib import Path

import axe_playwright_python

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "test-output" / "axe"
# Violations that fail a test by default; "moderate" and "minor" ones are only written to the
# report. ``ALL_IMPACTS``: every violation fails (the sweep, tests/e2e/test_axe_sweep.py).
FAILING_IMPACTS = ("serious", "critical")
ALL_IMPACTS = ("minor", "moderate", "serious", "critical")

RUN_AXE = """
async () => {
  const results = await axe.run(document, {resultTypes: ["violations"]});
  return results.violations.map(v => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    helpUrl: v.helpUrl,
    nodes: v.nodes.map(n => ({target: n.target, html: n.html, summary: n.failureSummary})),
  }));
}
"""


@cache
def axe_script() -> str:
    """The packaged axe-core (``axe.min.js``)."""
    return files(axe_playwright_python).joinpath("axe.min.js").read_text(encoding="utf-8")


def axe_version() -> str:
    """The axe-core version named in the script's licence header (``/*! axe v4.x.y``)."""
    return axe_script().split("\n", 1)[0].removeprefix("/*! axe v").strip()


def check_axe(page, name: str, impacts: tuple[str, ...] = FAILING_IMPACTS) -> list[dict]:
    """Run axe-core on ``page``; return its violations of the given ``impacts`` (by default
    the serious and critical ones; ``ALL_IMPACTS`` for every one).

    Every violation found (any impact) is written to ``test-output/axe/<name>.json`` with
    the page's address, so that a failing test's report says where and what.
    """
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(axe_script())
    violations = page.evaluate(RUN_AXE)
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{name}.json").write_text(
        json.dumps(
            {"url": page.url, "axe": axe_version(), "violations": violations},
            indent=2,
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    return [v for v in violations if v["impact"] in impacts]


def describe(violations: list[dict]) -> str:
    """One line per violation and element, for an assertion message."""
    return "\n".join(
        f"{v['impact']} {v['id']}: {v['help']} at {node['target']}"
        for v in violations
        for node in v["nodes"]
    )
