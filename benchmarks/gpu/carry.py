"""python benchmarks/gpu/carry.py [--out .carry] [--part-mb 20] [--wheels-mb 36] [--call-mb 64]

Prepare, on a machine with network, what a bare GPU machine without network needs to run the kit's
stages there, `mirl batch` included: the wheels its image lacks, for CPython 3.12 on manylinux x86-64
at the versions installed here, and the embedded policy's .gguf cut into parts small enough to travel
beside the repository (a device call carries 64 MiB).

Which wheels: the closure of ROOTS (the kit's own dependencies litellm and gguf; papermill, nbclient,
nbconvert, ipykernel, ipywidgets and the rest of what executes the stage notebooks on a `python3`
kernel and exports them to HTML), following each wheel's METADATA `Requires-Dist` (requirements whose
markers do not hold on Linux CPython 3.12 skipped, extras only where asked for, e.g. `bleach[css]`),
less what the image already has (IMAGE). litellm's wheel goes without its proxy's web UI, which the kit
never serves (7 MB less).

    .carry/wheels1/*.whl, .carry/wheels2/*.whl, ...   the kit's closure first, then the notebooks';
                              each folder at most --wheels-mb; installed there with
                              `pip install --no-index --no-deps --target`
    .carry/part1/gguf.part, .carry/part2/gguf.part, ...   the SmolLM2 .gguf, joined in order there
    manifest                  (in .carry and in every folder above) how many wheels folders and parts
                              there are and the .gguf's name, so any one folder tells unpack.sh what
                              is still to come

Then on the GPU machine, from the repository root: `source benchmarks/gpu/unpack.sh .carry`, which
installs each wheels folder that came into $CARRY_HOME/site (default ~/carry; it stays while the
machine is warm), copies the parts that came and, once all have, joins them; it exports PYTHONPATH and
a `python3` kernelspec for papermill, and says what is still missing. What does not fit one call
travels in the next ones: the printed plan lists the folders to carry per call, each call under
--call-mb less the working tree that travels with it (tracked and untracked-not-ignored files, and a
`shared/` folder in the checkout where there is one).
"""

from __future__ import annotations

import argparse
import email.parser
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
# what the kit imports and the image lacks; the closure adds their needs. Groups in order, the kit's first,
# so the first wheels folders alone serve the stages run outside notebooks (e2e_bench.py)
ROOTS = {
    "kit": ["litellm", "gguf"],
    # `mirl batch`: papermill on a python3 kernel, the HTML export, ipywidgets for notebook 02's curation UI
    "notebooks": ["papermill", "nbclient", "nbformat", "nbconvert", "ipykernel", "jupyter-client", "jupyter-core",
                  "ipython", "ipywidgets", "traitlets", "pyzmq", "tornado", "comm", "debugpy"],
    # `py-spy record --gil` of a stage's kernel: which threads hold the GIL while the engine's waits (NOTES.md)
    "profile": ["py-spy"],
}
# installed on the GPU image (Python 3.12.3, /opt/torch/.venv); never carried, whatever version is asked
IMAGE = {canonicalize_name(n) for n in """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
    charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools fsspec h11 hf-xet
    httpcore httpx huggingface-hub humanize idna iniconfig jinja2 joblib kiwisolver markdown markdown-it-py
    markupsafe matplotlib mdurl msgpack multidict networkx numpy packaging pandas pillow pip pluggy protobuf
    psutil pyarrow pygments pyparsing pytest python-dateutil pyyaml regex requests rich safetensors scipy
    seaborn sentencepiece setuptools six statsmodels sympy tabulate tiktoken tokenizers torch tqdm
    transformers triton typer typing-extensions urllib3 wheel wrapt xxhash yarl zipp
""".split()}
# litellm requires boto3 but imports it only for AWS providers (Bedrock, SageMaker), which the kit does
# not use; botocore alone is 14 MB
SKIP = {canonicalize_name(n) for n in ["boto3", "botocore", "s3transfer", "jmespath"]}
TARGET = {"implementation_name": "cpython", "implementation_version": "3.12.3", "os_name": "posix",
          "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
          "platform_system": "Linux", "platform_version": "", "python_full_version": "3.12.3",
          "python_version": "3.12", "sys_platform": "linux"}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64"]
MIB = 2**20


def download(pins: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + pins, check=True)


def wheels_in(dest: Path) -> dict[str, Path]:
    return {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in dest.glob("*.whl")}


def requires(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist, from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode("utf-8"))
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


def needed(req: Requirement, extras: set[str]) -> bool:
    """Does `req` apply on the target, for a dependency asked for with `extras`?"""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**TARGET, "extra": e}) for e in {""} | extras)


def pin(req: Requirement) -> tuple[str, str]:
    """(pip argument, note): the version installed here when it satisfies `req`, else what `req` allows."""
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return f"{req.name}{req.specifier}", "not installed here: pip's choice"
    if req.specifier.contains(Version(version), prereleases=True):
        return f"{req.name}=={version}", ""
    return f"{req.name}{req.specifier}", f"{version} installed here does not satisfy {req}: pip's choice"


def closure(roots: list[str], dest: Path, done: dict[str, set[str]], edges: list[tuple[str, Requirement]]) -> list[str]:
    """Download the closure of `roots` into `dest`, skipping what `done` (name -> extras followed) has; returns
    the names this call added, in the order met. A package of the image asked for with extras (litellm's
    `httpx[http2]`) is not carried, but what those extras add is: its wheel is fetched for its METADATA."""
    added: list[str] = []
    todo = [(None, Requirement(r)) for r in roots]
    meta = dest.parent / "image-metadata"
    while todo:
        fresh: dict[str, Requirement] = {}
        lookup: dict[str, Requirement] = {}
        for parent, req in todo:
            key = canonicalize_name(req.name)
            if key in SKIP or (key in IMAGE and not req.extras):
                continue
            edges.append((parent or "(root)", req))
            if key in IMAGE:
                lookup.setdefault(key, req)
            elif key not in done and key not in fresh:
                fresh[key] = req
        for where, reqs in ((dest, fresh), (meta, {k: r for k, r in lookup.items() if k not in wheels_in(meta)})):
            pins = {key: pin(req) for key, req in reqs.items()}
            for arg, note in pins.values():
                if note:
                    print(f"  {arg}: {note}")
            if pins:
                download([arg for arg, _ in pins.values()], where)
        have = {**wheels_in(meta), **wheels_in(dest)} if meta.exists() else wheels_in(dest)
        nxt, expanded = [], set()
        for _, req in todo:
            key = canonicalize_name(req.name)
            if key in SKIP or (key in IMAGE and not req.extras):
                continue
            extras = {canonicalize_name(e) for e in req.extras} - done.get(key, set())
            if key in IMAGE:  # only what its extras add
                done.setdefault(key, set()).update(extras)
                nxt += [(key, r) for r in requires(have[key]) if needed(r, extras) and not needed(r, set())]
                continue
            if key not in done:
                done[key] = set()
                added.append(key)
            if (key in fresh and key not in expanded) or extras:
                expanded.add(key)
                done[key] |= extras
                nxt += [(key, r) for r in requires(have[key]) if needed(r, extras)]
        todo = nxt
    shutil.rmtree(meta, ignore_errors=True)
    return added


def strip(wheel: Path, prefix: str) -> None:
    """Rewrite a wheel without the files under `prefix` (and their RECORD lines)."""
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


def on_disk(n: int) -> int:
    """A file's size as a device call counts it: whole 4 KiB blocks (a tree of 22.8 MiB in bytes, 25.8 in blocks,
    with 40.3 MiB of wheels was refused as over 64 MiB on 2026-12-07)."""
    return -(-n // 4096) * 4096


def size(path: Path) -> int:
    if not path.is_dir():
        return on_disk(path.stat().st_size)
    return sum(on_disk(f.stat().st_size) for f in path.rglob("*") if f.is_file())


def split(wheels: list[Path], limit: int) -> list[list[Path]]:
    """Consecutive folders of at most `limit` bytes each (a wheel larger than that gets one of its own)."""
    folders: list[list[Path]] = [[]]
    used = 0
    for w in wheels:
        s = w.stat().st_size
        if folders[-1] and used + s > limit:
            folders.append([])
            used = 0
        folders[-1].append(w)
        used += s
    return folders


def plan(dirs: list[Path], limit: int, most: int = 8) -> list[list[Path]]:
    """The folders to carry per call, in order, each call under `limit` bytes and `most` paths."""
    calls: list[list[Path]] = [[]]
    used = 0
    for d in dirs:
        s = size(d)
        if calls[-1] and (used + s > limit or len(calls[-1]) == most):
            calls.append([])
            used = 0
        calls[-1].append(d)
        used += s
    return calls


def tree_size(repo: Path = REPO) -> int:
    """Bytes of the working tree that travels with every device call: tracked and untracked files git
    does not ignore, and a `shared/` folder in the checkout."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    files = [repo / f for f in out.split("\0") if f]
    total = sum(on_disk(f.stat().st_size) for f in files if f.is_file() and not f.is_symlink())
    shared = repo / "shared"
    return total + (size(shared) if shared.is_dir() else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / ".carry"))
    ap.add_argument("--part-mb", type=float, default=20, help="the .gguf is cut into pieces of this size (MiB)")
    ap.add_argument("--wheels-mb", type=float, default=36, help="the most wheels one folder holds (MiB)")
    ap.add_argument("--call-mb", type=float, default=64, help="the most one device call carries, working tree included (MiB)")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    dl = out / "download"
    done: dict[str, set[str]] = {}
    edges: list[tuple[str, Requirement]] = []
    groups: list[list[str]] = []
    for group, roots in ROOTS.items():
        print(f"closure of {group}: {' '.join(roots)}")
        groups.append(closure(roots, dl, done, edges))
    have = wheels_in(dl)
    for key, wheel in have.items():
        if key == "litellm":
            strip(wheel, "litellm/proxy/_experimental/")
    versions = {key: parse_wheel_filename(w.name)[1] for key, w in have.items()}
    for parent, req in edges:  # every requirement met by the version carried?
        v = versions.get(canonicalize_name(req.name))
        if v is not None and not req.specifier.contains(v, prereleases=True):
            print(f"  warning: {parent} needs {req}, carrying {v}")
    pth = [f"{w.name}: {n}" for w in have.values() for n in zipfile.ZipFile(w).namelist()
           if "/" not in n and n.endswith(".pth")]
    if pth:  # --target trees go on PYTHONPATH, where .pth files are not read
        print("  warning: .pth files, ignored on PYTHONPATH: " + ", ".join(pth))

    folders = [f for keys in groups for f in split([have[k] for k in keys], int(args.wheels_mb * MIB))]
    wheel_dirs = []
    for i, ws in enumerate(folders, 1):
        d = out / f"wheels{i}"
        d.mkdir(parents=True)
        for w in ws:
            w.rename(d / w.name)
        wheel_dirs.append(d)
    shutil.rmtree(dl)

    from mirl.engines.weights import smollm2_gguf

    gguf = smollm2_gguf()
    data = gguf.read_bytes()
    step = int(args.part_mb * MIB)
    parts = -(-len(data) // step)
    part_dirs = []
    for i in range(parts):
        d = out / f"part{i + 1}"
        d.mkdir(parents=True)
        (d / "gguf.part").write_bytes(data[i * step:(i + 1) * step])
        part_dirs.append(d)
    manifest = f"wheels {len(wheel_dirs)}\nparts {parts}\ngguf {gguf.name}\n"
    for d in [out, *wheel_dirs, *part_dirs]:
        (d / "manifest").write_text(manifest)

    def rel(p: Path) -> str:
        return str(p.relative_to(REPO) if p.is_relative_to(REPO) else p)

    for d in wheel_dirs:
        names = " ".join(parse_wheel_filename(w.name)[0] for w in sorted(d.glob("*.whl")))
        print(f"{rel(d)}: {size(d) / MIB:.1f} MiB, {len(list(d.glob('*.whl')))} wheels: {names}")
    total = sum(size(d) for d in wheel_dirs)
    print(f"wheels in all: {total / MIB:.1f} MiB, {sum(len(list(d.glob('*.whl'))) for d in wheel_dirs)} wheels "
          f"in {len(wheel_dirs)} folder(s)")
    print(f"{gguf.name}: {len(data) / MIB:.1f} MiB in {parts} parts of at most {args.part_mb:g} MiB")
    tree = tree_size()
    room = int(args.call_mb * MIB) - tree - MIB // 2  # half a MiB spare: files written before the call
    print(f"working tree: {tree / MIB:.1f} MiB, so {room / MIB:.1f} MiB a call for the folders")
    for i, dirs in enumerate(plan(wheel_dirs + part_dirs, room), 1):
        print(f"call {i}: carry {' '.join(rel(d) for d in dirs)} ({sum(size(d) for d in dirs) / MIB:.1f} MiB)")
    too_big = [d for d in wheel_dirs + part_dirs if size(d) > room]
    if too_big:
        sys.exit("carry: no device call can take " + ", ".join(f"{rel(d)} ({size(d) / MIB:.1f} MiB)" for d in too_big)
                 + f" beside the {tree / MIB:.1f} MiB working tree: lower --wheels-mb / --part-mb, or make the"
                 " tracked tree smaller (a single wheel larger than the room cannot travel)")


if __name__ == "__main__":
    main()
