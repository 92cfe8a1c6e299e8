"""Checks that all but the two newest daily logs (by name) are gzip-compressed, losslessly."""

import gzip
import hashlib
import json
from pathlib import Path

LOGS = Path("/app/logs")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())
NEWEST = sorted(EXPECTED)[-2:]
OLDER = sorted(EXPECTED)[:-2]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_newest_two_uncompressed():
    for name in NEWEST:
        assert (LOGS / name).is_file(), f"{name} must stay uncompressed"
        assert sha((LOGS / name).read_bytes()) == EXPECTED[name]
        assert not (LOGS / f"{name}.gz").exists(), f"{name} must not be compressed"


def test_older_compressed_losslessly():
    for name in OLDER:
        gz = LOGS / f"{name}.gz"
        assert gz.is_file(), f"{gz.name} missing"
        assert sha(gzip.decompress(gz.read_bytes())) == EXPECTED[name], f"{gz.name} does not hold the original"


def test_older_originals_removed():
    left = [n for n in OLDER if (LOGS / n).exists()]
    assert not left, f"uncompressed originals still present: {left}"


def test_nothing_else_changed():
    names = {p.name for p in LOGS.iterdir()}
    assert names == {"README.txt", *NEWEST, *(f"{n}.gz" for n in OLDER)}
