"""The one CSV writer of every file the portal hands out (usage reports, the audit export):
no cell it writes can be read as a formula by a spreadsheet (OWASP "CSV injection").

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a
single quote in front, which spreadsheets show as text and never evaluate. A plain number
(``-1.5``) is left alone: it is no formula, and the reports' figures stay numbers.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class _Writable(Protocol):
    def write(self, value: str, /) -> Any: ...


def safe_cell(value: object) -> object:
    """``value`` as a cell no spreadsheet evaluates: text starting like a formula is quoted."""
    if (
        isinstance(value, str)
        and value.startswith(FORMULA_STARTS)
        and not _PLAIN_NUMBER.fullmatch(value)
    ):
        return "'" + value
    return value


class SafeWriter:
    """``csv.writer`` whose every cell goes through :func:`safe_cell`; ``writerow`` returns
    what the file's ``write`` returned (the line, for a streaming echo)."""

    def __init__(self, out: _Writable) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[object]) -> Any:
        return self._writer.writerow([safe_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[object]]) -> None:
        for row in rows:
            self.writerow(row)
