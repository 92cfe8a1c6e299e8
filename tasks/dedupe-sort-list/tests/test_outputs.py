"""Checks /app/unique.txt is the sorted set of names in /app/list.txt."""

from pathlib import Path

SOURCE = Path("/app/list.txt").read_text().split()
OUT = Path("/app/unique.txt")


def test_source_untouched():
    assert len(SOURCE) == 90


def test_unique_sorted():
    assert OUT.is_file(), f"{OUT} was not created"
    got = [l.strip() for l in OUT.read_text().splitlines() if l.strip()]
    assert got == sorted(set(SOURCE))
