"""Checks the root-cause host and resolution time taken from the incident notes."""

from pathlib import Path


def value(path: str) -> str:
    p = Path(path)
    assert p.is_file(), f"{path} was not created"
    return p.read_text().strip()


def test_root_cause_host():
    assert value("/app/root_cause.txt") == "db-replica-03"


def test_resolved_at():
    assert value("/app/resolved_at.txt") == "12:15"
