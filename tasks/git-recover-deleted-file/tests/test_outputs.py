"""The file is back with its last content; history and the other files are untouched."""
import subprocess
from pathlib import Path

REPO = "/app/repo"
LAST_VERSION = "region,currency,rate\nEU,EUR,0.21\nUK,GBP,0.20\nUS,USD,0.0725\nCH,CHF,0.081\nNO,NOK,0.25\n"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout.strip()


def test_file_restored_with_last_version():
    path = Path(REPO) / "data" / "rates.csv"
    assert path.is_file(), "data/rates.csv not restored"
    assert path.read_text() == LAST_VERSION


def test_history_untouched():
    assert git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git("log", "-1", "--format=%s") == "Add example rate file"
    assert git("rev-list", "--count", "HEAD") == "9"


def test_other_files_untouched():
    changed = set(git("diff", "HEAD", "--name-only").splitlines())
    untracked = set(git("ls-files", "--others", "--exclude-standard").splitlines())
    assert (changed | untracked) <= {"data/rates.csv"}
