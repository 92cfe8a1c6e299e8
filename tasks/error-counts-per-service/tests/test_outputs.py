"""Checks /app/error_counts.json against the per-service ERROR-level counts of the shipped logs."""

import json
from pathlib import Path

OUT = Path("/app/error_counts.json")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())


def load():
    assert OUT.is_file(), f"{OUT} was not created"
    data = json.loads(OUT.read_text())
    assert isinstance(data, dict), "the file must hold one JSON object"
    return data


def test_all_services_listed():
    assert set(load()) == set(EXPECTED)


def test_counts_are_integers():
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in load().values())


def test_counts_exact():
    got = load()
    wrong = {k: (got.get(k), v) for k, v in EXPECTED.items() if got.get(k) != v}
    assert not wrong, f"service: (got, expected) {wrong}"
