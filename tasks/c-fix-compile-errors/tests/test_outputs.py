"""The program builds with the original flags and summarises fresh inputs correctly."""
import random
import subprocess
from pathlib import Path

APP = Path("/app")
BIN = APP / "bin" / "stats"


def build():
    return subprocess.run(["make", "-B", "-C", str(APP)], capture_output=True, text=True, timeout=60)


def run_stats(tmp_path, values):
    data = tmp_path / "in.txt"
    data.write_text("".join(f"{v}\n" for v in values))
    out = subprocess.run([str(BIN), str(data)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_flags_kept():
    text = (APP / "Makefile").read_text()
    assert "-Werror" in text and "-Wall" in text and "-Wextra" in text


def test_builds_from_source():
    result = build()
    assert result.returncode == 0, result.stdout + result.stderr
    assert BIN.is_file()


def test_summary_random(tmp_path):
    assert build().returncode == 0
    rng = random.Random(7)
    for size in (1, 5, 40, 300):
        values = [rng.randint(-100000, 100000) for _ in range(size)]
        expected = f"count={len(values)} sum={sum(values)} min={min(values)} max={max(values)}"
        assert run_stats(tmp_path, values) == expected


def test_empty_file(tmp_path):
    assert build().returncode == 0
    assert run_stats(tmp_path, []) == "count=0"
