"""MIG profile tables, kept as plain data (one module per GPU model).

Each module defines ``TABLE``: a dict of literals (no logic) with the source URL and
section title of every value. ``scheduling.engine.mig`` turns them into dataclasses.
"""

from . import a30_24gb, a100_40gb, a100_80gb, h100_80gb, h200_141gb

ALL_TABLES = (
    a100_40gb.TABLE,
    a100_80gb.TABLE,
    a30_24gb.TABLE,
    h100_80gb.TABLE,
    h200_141gb.TABLE,
)
