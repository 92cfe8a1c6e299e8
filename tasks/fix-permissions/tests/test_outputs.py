"""Checks the file modes in /app/scripts and /app/config."""

import stat
import subprocess
from pathlib import Path

import pytest

SCRIPTS = ["backup", "deploy", "cleanup"]


def mode(path: str) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_mode_755(name):
    assert oct(mode(f"/app/scripts/{name}.sh")) == oct(0o755)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_runs(name):
    out = subprocess.run([f"/app/scripts/{name}.sh"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.strip() == f"{name} ok"


def test_secrets_mode_600():
    assert oct(mode("/app/config/secrets.env")) == oct(0o600)
    assert "DB_PASSWORD=correct-horse-battery-staple" in Path("/app/config/secrets.env").read_text()


@pytest.mark.parametrize("path", ["/app/scripts/README.md", "/app/config/app.conf"])
def test_others_unchanged(path):
    assert oct(mode(path)) == oct(0o644)
