"""make clean/all/test work from a clean state; sources and the test script are unchanged."""
import subprocess
from pathlib import Path

APP = Path("/app")


def make(*targets):
    return subprocess.run(["make", "-C", str(APP), *targets], capture_output=True, text=True, timeout=120)


def test_test_script_unchanged():
    assert (APP / "tests" / "run_tests.sh").read_text() == Path("/tests/run_tests.orig.sh").read_text()


def test_clean_all_test():
    r = make("clean")
    assert r.returncode == 0, r.stderr
    assert not (APP / "bin").exists() and not (APP / "build").exists()
    r = make("all")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (APP / "bin" / "calc").is_file()
    r = make("test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all tests passed" in r.stdout


def test_calc_results():
    assert make("all").returncode == 0
    for args, want in ((["hyp", "8", "15"], "17.000"), (["gcd", "84", "36"], "12"), (["fact", "15"], "1307674368000")):
        out = subprocess.run([str(APP / "bin" / "calc"), *args], capture_output=True, text=True, timeout=10)
        assert out.stdout.strip() == want
