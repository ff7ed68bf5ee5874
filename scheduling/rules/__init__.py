"""The pure rules: decisions as functions of plain data, with no Django, no I/O.

A module belongs here when it decides something (raise an alert, call a session idle, price a
use) from values it is handed, and reads and writes nothing itself: the services in
``scheduling.services`` load the rows, turn them into this package's dataclasses, and apply
the answer. So each rule is tested by example without a database.

- :mod:`.alert_rules`: when an alert is raised, escalated and resolved (hysteresis);
- :mod:`.idle_rules`: the idle policy's verdict (active, idle, warned, suspended, ended);
- :mod:`.pricing`: which price line prices a use, and what it costs.

import-linter checks the purity: this package imports no Django, DRF, Channels, Celery,
guardian or Redis, nothing from ``portal``, and neither ``scheduling.models`` nor
``scheduling.services`` (pyproject.toml).
"""
