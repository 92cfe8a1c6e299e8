"""corrupted.txt names exactly the files whose content no longer matches SHA256SUMS."""
import hashlib
from pathlib import Path

FILES = Path("/app/files")


def test_corrupted_list():
    out = Path("/app/corrupted.txt")
    assert out.is_file(), "missing /app/corrupted.txt"
    got = [l.strip() for l in out.read_text().splitlines() if l.strip()]
    assert got == ["invoice-002.txt", "photo.bin", "summary.json"]


def test_files_not_modified():
    listed = [line.split(None, 1) for line in Path("/app/SHA256SUMS").read_text().splitlines()]
    bad = {n for h, n in listed if hashlib.sha256((FILES / n).read_bytes()).hexdigest() != h}
    assert bad == {"invoice-002.txt", "photo.bin", "summary.json"}
