"""main gained a commit undoing the regression, kept every other change, and is clean and green."""
import shutil
import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout.strip()


def commit_by_subject(subject):
    hashes = git("log", "--all", "--format=%H", "--fixed-strings", f"--grep={subject}").splitlines()
    matches = [h for h in hashes if git("log", "-1", "--format=%s", h) == subject]
    assert len(matches) == 1, f"expected one commit named {subject!r}"
    return matches[0]


def test_on_main_and_history_kept():
    assert git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    original_head = commit_by_subject("Add price list export")
    bad = commit_by_subject("Simplify rounding helper")
    assert subprocess.run(["git", "-C", REPO, "merge-base", "--is-ancestor", original_head, "main"]).returncode == 0
    assert subprocess.run(["git", "-C", REPO, "merge-base", "--is-ancestor", bad, "main"]).returncode == 0
    assert git("rev-parse", "main") != original_head, "no new commit on main"


def test_working_tree_clean():
    assert git("status", "--porcelain", "--untracked-files=all") == ""


def test_regression_undone_and_features_kept():
    pricing = git("show", "main:pricing.py")
    assert "return round(value + 1e-9, 2)" in pricing
    assert "int(value * 100) / 100" not in pricing
    assert "TAX_RATE = 0.21" in pricing
    assert "net price cannot be negative" in pricing
    assert "def bulk_discount" in pricing
    for path in ("formatting.py", "export.py", "CHANGELOG.md", "test_export.py", "test_formatting.py"):
        git("cat-file", "-e", f"main:{path}")


def test_tests_unchanged():
    original_head = commit_by_subject("Add price list export")
    assert git("diff", original_head, "main", "--", "test_pricing.py", "test_formatting.py", "test_export.py") == ""


def test_suite_passes_on_main(tmp_path):
    work = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", REPO, str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", "main"], check=True)
    r = subprocess.run(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=work, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-2000:]
    probe = "from pricing import with_tax, round_price; print(with_tax(100.0), round_price(0.295), with_tax(1.25))"
    r = subprocess.run(["python3", "-c", probe], cwd=work, capture_output=True, text=True, timeout=30)
    assert r.stdout.split() == ["121.0", "0.3", "1.51"], r.stdout + r.stderr
    shutil.rmtree(work)
