"""Checks the fetch_data -> load_records migration: exact file contents and a warnings-as-errors run."""

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

SRC = Path("/app/src")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())
APP_FILES = ["app/report.py", "app/sync.py", "app/cli/export.py", "tools/migrate.py"]
UNTOUCHED = ["mylib/records.py", "vendor/legacyclient/client.py", "CHANGELOG.md", "main.py"]
OUTPUT = ["stock items=3 units=55 warmed=5", "sync short=0 returns=1",
          "export lines=5 tables_rows=4", "migrate moved=gadget"]


def digest(rel: str) -> str:
    return hashlib.sha256((SRC / rel).read_bytes()).hexdigest()


@pytest.mark.parametrize("rel", APP_FILES)
def test_no_deprecated_reference_left(rel):
    text = (SRC / rel).read_text()
    assert not re.search(r"\bfetch_data\b", text), f"{rel} still references fetch_data"


@pytest.mark.parametrize("rel", UNTOUCHED)
def test_protected_files_unchanged(rel):
    assert digest(rel) == EXPECTED[rel], f"{rel} must not be modified"


def test_every_file_exactly_as_expected():
    wrong = [rel for rel in EXPECTED if not (SRC / rel).is_file() or digest(rel) != EXPECTED[rel]]
    assert not wrong, f"unexpected content in {wrong}"


def test_runs_without_deprecation_warnings():
    out = subprocess.run(["python3", "-W", "error::DeprecationWarning", "main.py"], cwd=SRC,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == OUTPUT
