"""python benchmarks/gpu/carry.py [--out .carry] [--part-mb 20]

Prepare, on a machine with network, what a bare GPU machine without network needs to run the kit's
stages there: the wheels its image lacks (the kit's own dependencies litellm and gguf and what they
need, for CPython 3.12 on manylinux x86-64, the versions installed here) and the embedded policy's
.gguf cut into parts small enough to travel beside the repository (a device call carries 64 MiB).

    .carry/wheels/*.whl       installed there with `pip install --no-index --no-deps --target` (litellm's
                              wheel without its proxy's web UI, which the kit never serves: 7 MB less)
    .carry/part1/gguf.part, .carry/part2/gguf.part, ...   the SmolLM2 .gguf, joined in order there

Then on the GPU machine, from the repository root: `bash benchmarks/gpu/unpack.sh .carry`, which
installs the wheels into $CARRY_HOME/site (default ~/carry; it stays while the machine is warm),
copies the parts that came and, once all have, joins them; it prints the `export` line to use.
Parts that do not fit one call travel in the next ones (each call: carry `.carry/partN`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# what the GPU image (benchmarks/gpu/NOTES.md) lacks for mirl's stages: litellm, gguf and their needs
PACKAGES = ["litellm", "gguf", "openai", "pydantic", "pydantic-core", "pydantic-settings", "annotated-types",
            "typing-inspection", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "fastuuid",
            "jiter", "python-dotenv", "importlib-metadata", "truststore", "httpx2", "httpcore2", "h2", "hpack",
            "hyperframe", "sniffio"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64"]


def download(names: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{n}=={metadata.version(n)}" for n in names]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + pins, check=True)


def strip(wheel: Path, prefix: str) -> None:
    """Rewrite a wheel without the files under `prefix` (and their RECORD lines)."""
    import zipfile

    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(prefix):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(prefix.encode()))
            dst.writestr(info, data)
    tmp.replace(wheel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / ".carry"))
    ap.add_argument("--part-mb", type=float, default=20, help="the .gguf is cut into pieces of this size")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    download(PACKAGES, out / "wheels")
    for wheel in (out / "wheels").glob("litellm-*.whl"):
        strip(wheel, "litellm/proxy/_experimental/")
    from mirl.engines.weights import smollm2_gguf

    gguf = smollm2_gguf()
    data = gguf.read_bytes()
    size = int(args.part_mb * 2**20)
    parts = -(-len(data) // size)
    for i in range(parts):
        part = out / f"part{i + 1}" / "gguf.part"
        part.parent.mkdir(parents=True)
        part.write_bytes(data[i * size:(i + 1) * size])
    (out / "gguf.name").write_text(gguf.name + "\n")
    (out / "gguf.parts").write_text(f"{parts}\n")
    for d in sorted(out.iterdir()):
        mb = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / 2**20 if d.is_dir() else d.stat().st_size / 2**20
        print(f"{d.relative_to(REPO) if d.is_relative_to(REPO) else d}: {mb:.1f} MiB")


if __name__ == "__main__":
    main()
