"""The nightly manifest lists every file under /app/projects with its sha256."""
import hashlib
from pathlib import Path

SRC = Path("/app/projects")


def test_manifest():
    manifest = Path("/app/manifests/nightly.manifest")
    assert manifest.is_file(), "missing /app/manifests/nightly.manifest"
    files = sorted((p.relative_to(SRC).as_posix() for p in SRC.rglob("*") if p.is_file()), key=lambda s: s.encode())
    expected = ["label: nightly", "source: /app/projects", f"files: {len(files)}"]
    expected += [f"{hashlib.sha256((SRC / f).read_bytes()).hexdigest()}  {f}" for f in files]
    got = manifest.read_text().splitlines()
    assert got[1].startswith("source: ") and Path(got[1][len("source: "):]).resolve() == SRC
    got[1] = "source: /app/projects"  # the same directory may be spelled with a trailing slash
    assert got == expected
