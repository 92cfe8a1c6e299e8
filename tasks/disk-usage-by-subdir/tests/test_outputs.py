"""usage.txt lists every subdirectory with its du -sk size, largest first."""
import subprocess
from pathlib import Path

DATA = Path("/app/data")


def du_kb(path):
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def test_usage_file():
    out = Path("/app/usage.txt")
    assert out.is_file(), "missing /app/usage.txt"
    rows = [line.split("\t") for line in out.read_text().splitlines() if line.strip()]
    assert all(len(r) == 2 for r in rows), "each line must be SIZE<TAB>NAME"
    got = [(int(size), name.strip()) for size, name in rows]
    expected = sorted(((du_kb(d), d.name) for d in DATA.iterdir() if d.is_dir()), reverse=True)
    assert got == expected
