"""Checks release.zip holds exactly the three files and that SHA256SUMS verifies the unpacked archive."""

import subprocess
import zipfile
from pathlib import Path

DIST = Path("/app/dist")
FILES = {"README.md", "bin/tool.sh", "lib/util.py"}


def manifest_paths() -> list[str]:
    text = (DIST / "SHA256SUMS").read_text()
    return [line.split(None, 1)[1].lstrip("*").removeprefix("./") for line in text.splitlines() if line.strip()]


def test_zip_members():
    with zipfile.ZipFile(DIST / "release.zip") as z:
        names = {n for n in z.namelist() if not n.endswith("/")}
    assert names == FILES


def test_zip_contents_match_release():
    with zipfile.ZipFile(DIST / "release.zip") as z:
        for name in FILES:
            assert z.read(name) == (Path("/app/release") / name).read_bytes(), name


def test_manifest_lists_exactly_the_files():
    paths = manifest_paths()
    assert sorted(paths) == sorted(FILES), f"manifest lists {paths}"


def test_manifest_checks_in_release_dir():
    out = subprocess.run(["sha256sum", "-c", str(DIST / "SHA256SUMS")], cwd="/app/release",
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_manifest_checks_unpacked_zip(tmp_path):
    with zipfile.ZipFile(DIST / "release.zip") as z:
        z.extractall(tmp_path)
    out = subprocess.run(["sha256sum", "-c", str(DIST / "SHA256SUMS")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_release_untouched():
    assert (Path("/app/release/notes.tmp")).is_file() and (Path("/app/release/build.log")).is_file()
