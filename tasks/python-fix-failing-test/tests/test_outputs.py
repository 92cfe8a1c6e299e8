"""The shipped tests (an untouched copy) and further tests of the documented behaviour pass."""
import subprocess
import sys

sys.path.insert(0, "/app")


def test_visible_suite_passes_unmodified():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "/tests/test_slug_visible.py"],
                       cwd="/app", capture_output=True, text=True, timeout=60, env={"PYTHONPATH": "/app", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout[-2000:]


def test_app_suite_passes():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                       cwd="/app", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-2000:]


def test_shipped_tests_not_edited():
    from pathlib import Path
    assert Path("/app/tests/test_slug.py").read_text() == Path("/tests/test_slug_visible.py").read_text()


def test_hidden_cases():
    from textkit import slugify
    assert slugify("  --Already--slugged--  ") == "already-slugged"
    assert slugify("snake_case_name") == "snake-case-name"
    assert slugify("Ünïcödé 2024: Résumé!") == "unicode-2024-resume"
    assert slugify("日本 tokyo") == "tokyo"
    assert slugify("!!!") == ""
    assert slugify("abc def ghi", max_length=4) == "abc"
    assert slugify("abc def", max_length=3) == "abc"
    assert slugify("Version 2.0 -- final", max_length=100) == "version-2-0-final"
