"""branch_info.txt holds the checked-out branch and its commit count."""
import subprocess
from pathlib import Path


def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout.strip()


def test_branch_info():
    out = Path("/app/branch_info.txt")
    assert out.is_file(), "missing /app/branch_info.txt"
    lines = [l.strip() for l in out.read_text().splitlines() if l.strip()]
    assert git("branch", "--show-current") == "release-2.4"
    assert git("rev-list", "--count", "HEAD") == "8"
    assert lines == ["release-2.4", "8"]
