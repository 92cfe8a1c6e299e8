"""Checks /app/large_files.txt lists the files over 51200 bytes, largest first."""

from pathlib import Path

OUT = Path("/app/large_files.txt")
EXPECTED = [
    "/app/data/images/banner.png",       # 300000
    "/app/data/reports/q1.pdf",          # 120000
    "/app/data/archive/old/backup.tar",  # 80000
    "/app/data/.cache/blob.bin",         # 65536
    "/app/data/reports/q2.pdf",          # 51201 (logo.png has exactly 51200: not larger)
]


def lines() -> list[str]:
    assert OUT.is_file(), f"{OUT} was not created"
    return [l.strip() for l in OUT.read_text().splitlines() if l.strip()]


def test_same_files():
    assert set(lines()) == set(EXPECTED)


def test_sorted_by_size_desc():
    assert lines() == EXPECTED
