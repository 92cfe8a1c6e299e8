"""The answer is the commit that first added the line (not a later re-add, move or mention)."""
import subprocess
from pathlib import Path


def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout.strip()


def first_commit_adding(line):
    for h in git("rev-list", "--reverse", "HEAD").splitlines():
        added = [l[1:] for l in git("show", "--format=", h).splitlines() if l.startswith("+") and not l.startswith("+++")]
        if line in added:
            return h
    raise AssertionError("line never added")


def test_answer():
    answer = Path("/app/commit.txt")
    assert answer.is_file(), "missing /app/commit.txt"
    expected = first_commit_adding("MAX_RETRIES = 7")
    assert git("log", "-1", "--format=%s", expected) == "Tune network behaviour for the EU region"
    assert answer.read_text().strip() == expected
