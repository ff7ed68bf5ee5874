"""The demo runner and the benchmarks: not part of the installed product.

``pyproject.toml`` installs only ``portal``, ``scheduling`` and ``nodeagent``; this package is
run from the repository root (``python -m bench.demo``, ``make demo``; ``python -m bench.storm``
and the others, figures in ``docs/measurements.md``), where ``python -m`` finds it. The product
never imports it (an import-linter contract).
"""
