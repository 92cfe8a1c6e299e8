"""Checks /app/category_totals.csv against totals computed from a pristine copy of the sales data."""

import csv
import re
from decimal import Decimal
from pathlib import Path

OUT = Path("/app/category_totals.csv")


def expected() -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    with open(Path(__file__).with_name("sales.csv"), newline="") as f:
        for row in csv.DictReader(f):
            totals[row["category"]] = totals.get(row["category"], Decimal(0)) + Decimal(row["amount"])
    return totals


def rows() -> list[list[str]]:
    assert OUT.is_file(), f"{OUT} was not created"
    with open(OUT, newline="") as f:
        return [r for r in csv.reader(f) if r]


def test_header():
    assert rows()[0] == ["category", "total"]


def test_totals_exact():
    got = {r[0]: r[1] for r in rows()[1:]}
    want = expected()
    assert set(got) == set(want), f"categories differ: {sorted(got)} vs {sorted(want)}"
    for cat, total in got.items():
        assert re.fullmatch(r"-?\d+\.\d{2}", total), f"{cat}: total {total!r} needs two decimals"
        assert Decimal(total) == want[cat], f"{cat}: got {total}, want {want[cat]}"


def test_sorted_descending():
    totals = [Decimal(r[1]) for r in rows()[1:]]
    assert totals and totals == sorted(totals, reverse=True)
