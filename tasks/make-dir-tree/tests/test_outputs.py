"""Checks the exact skeleton under /app/project."""

import os
from pathlib import Path

ROOT = Path("/app/project")


def test_tree_is_exact():
    found = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        for n in dirnames:
            found.add(str(Path(dirpath, n).relative_to(ROOT)) + "/")
        for n in filenames:
            found.add(str(Path(dirpath, n).relative_to(ROOT)))
    assert found == {"README.md", "src/", "src/main.py", "tests/", "docs/", "docs/notes.txt"}


def test_readme():
    assert (ROOT / "README.md").read_text() == "# Inventory Service\n"


def test_main_py():
    assert (ROOT / "src/main.py").read_text() == 'print("hello")\n'


def test_notes_empty():
    assert (ROOT / "docs/notes.txt").stat().st_size == 0
