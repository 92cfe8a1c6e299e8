"""Checks /app/confs holds exactly the .conf files of the bundle, with their paths and contents."""

import hashlib
import json
from pathlib import Path

CONFS = Path("/app/confs")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


def test_exact_file_set():
    assert CONFS.is_dir(), f"{CONFS} does not exist"
    assert files_under(CONFS) == set(EXPECTED)


def test_contents_match_archive():
    for rel, digest in EXPECTED.items():
        assert hashlib.sha256((CONFS / rel).read_bytes()).hexdigest() == digest, rel


def test_nothing_else_extracted():
    assert Path("/app/bundle.tar.gz").is_file()
    assert {p.name for p in Path("/app").iterdir()} == {"bundle.tar.gz", "confs"}
