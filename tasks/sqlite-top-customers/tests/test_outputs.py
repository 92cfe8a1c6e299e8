"""Checks /app/top_customers.csv against the report computed from the shipped database."""

import csv
from pathlib import Path

OUT = Path("/app/top_customers.csv")


def read(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return [[c.strip() for c in row] for row in csv.reader(f) if row]


EXPECTED = read(Path(__file__).with_name("expected.csv"))


def test_file_exists():
    assert OUT.is_file(), f"{OUT} was not created"


def test_header_and_row_count():
    rows = read(OUT)
    assert rows[0] == ["rank", "customer_id", "name", "country", "revenue"]
    assert len(rows) == 6, f"expected header + 5 rows, got {len(rows)} rows"


def test_customer_ids_in_order():
    assert [r[1] for r in read(OUT)[1:]] == [r[1] for r in EXPECTED[1:]]


def test_rows_exact():
    assert read(OUT)[1:] == EXPECTED[1:]
