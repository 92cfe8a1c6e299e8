"""Checks /app/count.txt holds the line count of /app/data.txt (empty lines included)."""

from pathlib import Path

EXPECTED = 137  # wc -l of the shipped data.txt; 130 non-empty lines


def test_count_file_exists():
    assert Path("/app/count.txt").is_file(), "/app/count.txt was not created"


def test_count_is_exact():
    text = Path("/app/count.txt").read_text().strip()
    assert text.isdigit(), f"expected only a number, got {text!r}"
    assert int(text) == EXPECTED, f"expected {EXPECTED}, got {text}"


def test_data_untouched():
    assert len(Path("/app/data.txt").read_text().splitlines()) == EXPECTED
