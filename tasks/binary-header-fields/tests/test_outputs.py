"""Checks the decoded header and record facts in /app/header.json."""

import json
from pathlib import Path

import pytest

OUT = Path("/app/header.json")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())


def load() -> dict:
    assert OUT.is_file(), f"{OUT} was not created"
    data = json.loads(OUT.read_text())
    assert isinstance(data, dict)
    return data


def test_exact_keys():
    assert set(load()) == set(EXPECTED)


@pytest.mark.parametrize("key", ["magic", "version", "record_count", "device", "first_timestamp", "last_timestamp"])
def test_exact_field(key):
    got = load().get(key)
    assert type(got) is type(EXPECTED[key]), f"{key}: expected a {type(EXPECTED[key]).__name__}, got {got!r}"
    assert got == EXPECTED[key], f"{key}: got {got!r}"


def test_max_value():
    got = load().get("max_value")
    assert isinstance(got, (int, float)) and not isinstance(got, bool)
    assert abs(got - EXPECTED["max_value"]) < 0.006, f"max_value: got {got!r}"
