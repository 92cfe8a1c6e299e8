"""The local base image: a Debian bookworm root filesystem built with debootstrap.

No image registry is reachable on the machines we run on, so tasks whose Dockerfile starts
`FROM <unpullable image>` are built on this image instead, and the bubblewrap backend uses the
root filesystem directly. The rootfs lives in `user_cache_dir()/base/rootfs`; a stamp file next
to it records the hash of the package list, so changing `BASE_PACKAGES` rebuilds it. A rootfs
without a stamp (built by hand with the same packages) is adopted after checking that every
package is installed. Builds go to a temp dir renamed into place, so a killed build never
leaves half a rootfs behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mirl.sandbox.base import SandboxError, user_cache_dir

log = logging.getLogger(__name__)

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DEFAULT_IMAGE = "mirl-base"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STAMP_LABEL = "mirl.base.stamp"

# What terminal tasks commonly expect of an Ubuntu-like image: python with the test stack,
# compilers, and the usual command-line tools agents reach for.
BASE_PACKAGES = (
    "bash", "ca-certificates", "openssl",
    "python3", "python3-pip", "python3-venv", "python3-pytest", "python3-pandas", "python3-numpy",
    "python3-scipy", "python3-yaml", "python3-requests",
    "sqlite3", "git", "gcc", "g++", "make", "binutils", "patch",
    "jq", "file", "procps", "psmisc", "curl", "xxd", "less", "tree", "bc", "lsof",
    "zip", "unzip", "xz-utils", "bzip2",
    "netcat-openbsd", "iproute2", "cron", "nano", "vim-tiny",
)


def base_dir() -> Path:
    return Path(user_cache_dir()) / "base"


def rootfs_dir() -> Path:
    return base_dir() / "rootfs"


def packages_hash(packages: tuple[str, ...] | list[str] = BASE_PACKAGES) -> str:
    text = "\n".join([SUITE, *sorted(set(packages))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stamp_path(dest: Path) -> Path:
    return dest.parent / (dest.name + ".stamp.json")


def read_stamp(dest: Path | None = None) -> dict | None:
    try:
        data = json.loads(_stamp_path(dest or rootfs_dir()).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _write_stamp(dest: Path, packages, how: str) -> dict:
    stamp = {"packages_hash": packages_hash(packages), "packages": sorted(set(packages)), "suite": SUITE,
             "how": how, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path = _stamp_path(dest)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp, indent=1))
    tmp.replace(path)
    return stamp


def missing_packages(root: Path, packages=BASE_PACKAGES) -> list[str]:
    """Packages of the list that the dpkg database in `root` does not show as installed."""
    info = root / "var" / "lib" / "dpkg" / "info"
    return [p for p in packages if not (info / f"{p}.list").exists() and not any(info.glob(f"{p}:*.list"))]


def rootfs_state(dest: Path | None = None, packages=BASE_PACKAGES) -> str:
    """'current', 'stale' (other package list), 'unstamped' (usable, not yet adopted) or 'missing'."""
    dest = dest or rootfs_dir()
    if not (dest / "usr" / "bin").is_dir():
        return "missing"
    stamp = read_stamp(dest)
    if stamp is None:
        return "unstamped" if not missing_packages(dest, packages) else "stale"
    return "current" if stamp.get("packages_hash") == packages_hash(packages) else "stale"


def build_rootfs(dest: Path | None = None, packages=BASE_PACKAGES, force: bool = False) -> tuple[Path, str]:
    """Make sure `dest` holds a rootfs with `packages`; returns (path, what was done).

    Reuses a current rootfs, adopts an unstamped one that has every package, and otherwise runs
    `debootstrap --variant=minbase` into a temp dir next to `dest` and renames it into place.
    """
    dest = Path(dest or rootfs_dir())
    state = rootfs_state(dest, packages)
    if not force and state == "current":
        return dest, "reused"
    if not force and state == "unstamped":
        _write_stamp(dest, packages, "adopted")
        return dest, "adopted (every package present)"
    if shutil.which("debootstrap") is None:
        raise SandboxError("building the base root filesystem needs debootstrap: `apt-get install debootstrap`")
    if os.geteuid() != 0:
        raise SandboxError("debootstrap needs root to build the base root filesystem; run `mirl image build` as root")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".build-", dir=dest.parent))
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(tmp), MIRROR]
    log.info("building base rootfs: %s", " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise SandboxError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
        # apt caches make the image bigger and are useless offline
        shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (tmp / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        old = dest.with_name(dest.name + ".old")
        if dest.exists():
            shutil.rmtree(old, ignore_errors=True)
            dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _write_stamp(dest, packages, "debootstrap")
    return dest, "built"


# --- the host's extra CA certificates ----------------------------------------------------

_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


def host_ca_bundle() -> Path | None:
    """The host's CA bundle file (SSL_CERT_FILE, OpenSSL's default, or Debian's path)."""
    import ssl

    for candidate in (os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().openssl_cafile,
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def host_extra_cas(rootfs: Path | None = None) -> list[str]:
    """PEM certificates the host trusts and the rootfs does not.

    Machines behind a TLS-intercepting proxy trust its CA; without it, `pip install` in a task's
    Dockerfile fails with CERTIFICATE_VERIFY_FAILED. The base image gets these added.
    """
    bundle = host_ca_bundle()
    if bundle is None:
        return []
    mine = (Path(rootfs or rootfs_dir()) / "etc" / "ssl" / "certs" / "ca-certificates.crt")
    theirs = set(_PEM.findall(mine.read_text(errors="replace"))) if mine.is_file() else set()
    seen: set[str] = set()
    extra = []
    for pem in _PEM.findall(bundle.read_text(errors="replace")):
        if pem not in theirs and pem not in seen:
            seen.add(pem)
            extra.append(pem)
    return extra


def image_stamp(rootfs: Path | None = None) -> str:
    """What an up-to-date base image is labeled with: the package list and the extra CAs."""
    stamp = (read_stamp(rootfs or rootfs_dir()) or {}).get("packages_hash", "unknown")
    cas = host_extra_cas(rootfs)
    if cas:
        stamp += "-ca" + hashlib.sha256("".join(cas).encode()).hexdigest()[:8]
    return stamp


# --- importing into an engine -------------------------------------------------------------


@dataclass
class ImageInfo:
    name: str
    id: str | None  # None when the engine has no such image
    stamp: str | None  # the rootfs stamp recorded in the image's label; None for unlabeled imports
    size: int = 0


def _docker_image_info(client, name: str) -> ImageInfo:
    import docker

    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return ImageInfo(name, None, None)
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    return ImageInfo(name, image.id, labels.get(STAMP_LABEL), int(image.attrs.get("Size") or 0))


def _podman_image_info(name: str) -> ImageInfo:
    from mirl.sandbox.podman import podman_env

    proc = subprocess.run(["podman", "image", "inspect", name], capture_output=True, text=True, env=podman_env())
    if proc.returncode != 0:
        return ImageInfo(name, None, None)
    data = json.loads(proc.stdout)[0]
    labels = (data.get("Config") or {}).get("Labels") or data.get("Labels") or {}
    return ImageInfo(name, data.get("Id"), labels.get(STAMP_LABEL), int(data.get("Size") or 0))


def image_info(client_or_podman, name: str = DEFAULT_IMAGE) -> ImageInfo:
    """What the engine (a docker SDK client, or the string 'podman' for the CLI) holds under `name`."""
    if client_or_podman == "podman":
        return _podman_image_info(name)
    return _docker_image_info(client_or_podman, name)


def image_state(client_or_podman, name: str = DEFAULT_IMAGE, rootfs: Path | None = None) -> str:
    """'current', 'unlabeled' (imported by hand; reused when no CA is missing), 'stale' or 'missing'."""
    info = image_info(client_or_podman, name)
    if info.id is None:
        return "missing"
    if info.stamp is None:
        return "stale" if host_extra_cas(rootfs) else "unlabeled"
    return "current" if info.stamp == image_stamp(rootfs) else "stale"


def import_image(client_or_podman, name: str = DEFAULT_IMAGE, rootfs: Path | None = None, force: bool = False) -> tuple[ImageInfo, str]:
    """Import the rootfs as image `name` unless an up-to-date one is there; returns (info, what was done).

    `client_or_podman` is a docker SDK client or the string 'podman' (the CLI, no service needed).
    """
    rootfs = Path(rootfs or rootfs_dir())
    state = image_state(client_or_podman, name, rootfs)
    if not force and state in ("current", "unlabeled"):
        return image_info(client_or_podman, name), "reused" if state == "current" else "reused (unlabeled import)"
    if rootfs_state(rootfs) == "missing":
        raise SandboxError(f"no base root filesystem at {rootfs}; run `mirl image build` first")
    stamp = image_stamp(rootfs)
    changes = [f"ENV PATH={PATH_ENV}", "ENV LANG=C.UTF-8", "WORKDIR /", 'CMD ["bash"]', f"LABEL {STAMP_LABEL}={stamp}"]
    cas = host_extra_cas(rootfs)
    target = f"{name}-rootfs" if cas else name  # the CAs go in a layer on top
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
    try:
        if client_or_podman == "podman":
            from mirl.sandbox.podman import podman_env

            cmd = ["podman", "import"]
            for change in changes:
                cmd += ["--change", change]
            proc = subprocess.run([*cmd, "-", f"{target}:latest"], stdin=tar.stdout, capture_output=True, text=True, env=podman_env())
            if proc.returncode != 0:
                raise SandboxError(f"podman import failed: {proc.stderr.strip()[-500:]}")
        else:
            client_or_podman.api.import_image_from_stream(tar.stdout, repository=target, tag="latest", changes=changes)
    finally:
        tar.stdout.close()
        tar.wait()
    if tar.returncode != 0:
        raise SandboxError(f"tar of {rootfs} failed (exit {tar.returncode})")
    if cas:
        _add_cas(client_or_podman, target, name, cas, stamp)
    info = image_info(client_or_podman, name)
    if info.id is None:
        raise SandboxError(f"importing {rootfs} as {name} reported success but the engine has no such image")
    return info, "imported" + (f" (+{len(cas)} CA certificate(s) of the host)" if cas else "")


def _add_cas(client_or_podman, source: str, name: str, cas: list[str], stamp: str) -> None:
    """Build `name` from `source` plus the host's extra CA certificates in the system bundle."""
    with tempfile.TemporaryDirectory() as ctx:
        for i, pem in enumerate(cas):
            Path(ctx, f"mirl-host-{i}.crt").write_text(pem + "\n")
        Path(ctx, "Dockerfile").write_text(
            f"FROM {source}\nCOPY *.crt /usr/local/share/ca-certificates/\n"
            f"RUN update-ca-certificates >/dev/null\nLABEL {STAMP_LABEL}={stamp}\n"
        )
        if client_or_podman == "podman":
            from mirl.sandbox.podman import podman_env

            proc = subprocess.run(["podman", "build", "-q", "--network", "none", "-t", f"{name}:latest", ctx],
                                  capture_output=True, text=True, env=podman_env())
            if proc.returncode != 0:
                raise SandboxError(f"adding CA certificates to {name} failed: {proc.stderr.strip()[-500:]}")
        else:
            import docker

            try:
                client_or_podman.images.build(path=ctx, tag=f"{name}:latest", rm=True, forcerm=True, pull=False,
                                              network_mode="none")
            except docker.errors.BuildError as e:
                raise SandboxError(f"adding CA certificates to {name} failed: {e}") from e
