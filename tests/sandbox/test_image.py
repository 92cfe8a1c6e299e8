"""The local base image: rootfs stamps (reuse, adopt, rebuild) and imports into a real engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mirl.sandbox import image
from mirl.sandbox.base import SandboxError
from tests.real import missing

PACKAGES = ("python3", "jq")


def fake_rootfs(root: Path, packages=PACKAGES, certs: str | None = None) -> Path:
    """A directory that looks like a debootstrapped rootfs to the stamp logic (dpkg lists, bundle)."""
    (root / "usr" / "bin").mkdir(parents=True)
    info = root / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    for p in packages:
        (info / f"{p}.list").write_text("/usr\n")
    bundle = image.host_ca_bundle()
    (root / "etc" / "ssl" / "certs").mkdir(parents=True)
    text = certs if certs is not None else (bundle.read_text() if bundle else "")
    (root / "etc" / "ssl" / "certs" / "ca-certificates.crt").write_text(text)
    (root / "hello.txt").write_text("hi\n")
    return root


def test_packages_hash_ignores_order_and_sees_changes():
    assert image.packages_hash(["a", "b"]) == image.packages_hash(["b", "a", "a"])
    assert image.packages_hash(["a", "b"]) != image.packages_hash(["a", "b", "c"])
    assert "python3" in image.BASE_PACKAGES and "python3-pytest" in image.BASE_PACKAGES


def test_unstamped_rootfs_with_every_package_is_adopted_then_current(tmp_path):
    root = fake_rootfs(tmp_path / "rootfs")
    assert image.rootfs_state(root, PACKAGES) == "unstamped"
    path, what = image.build_rootfs(root, PACKAGES)
    assert path == root and what.startswith("adopted")
    assert image.read_stamp(root)["packages_hash"] == image.packages_hash(PACKAGES)
    assert image.rootfs_state(root, PACKAGES) == "current"
    assert image.build_rootfs(root, PACKAGES)[1] == "reused"
    assert image.rootfs_state(root, PACKAGES + ("git",)) == "stale"
    assert image.rootfs_state(tmp_path / "nothing", PACKAGES) == "missing"


def test_missing_package_makes_unstamped_rootfs_stale(tmp_path):
    root = fake_rootfs(tmp_path / "rootfs", packages=("python3",))
    assert image.missing_packages(root, PACKAGES) == ["jq"]
    assert image.rootfs_state(root, PACKAGES) == "stale"


def test_rebuild_without_debootstrap_is_a_clear_error(tmp_path, monkeypatch):
    root = fake_rootfs(tmp_path / "rootfs", packages=("python3",))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SandboxError, match="apt-get install debootstrap"):
        image.build_rootfs(root, PACKAGES)
    assert (root / "hello.txt").exists()  # a failed rebuild leaves the old rootfs alone


def test_host_extra_cas_are_the_certificates_the_rootfs_lacks(tmp_path):
    bundle = image.host_ca_bundle()
    if bundle is None or "BEGIN CERTIFICATE" not in bundle.read_text():
        pytest.skip("the host has no CA bundle")
    assert image.host_extra_cas(fake_rootfs(tmp_path / "same")) == []
    extra = image.host_extra_cas(fake_rootfs(tmp_path / "bare", certs=""))
    assert extra and all(pem.startswith("-----BEGIN CERTIFICATE-----") for pem in extra)


# --- real engine --------------------------------------------------------------------------


@pytest.mark.podman
def test_base_image_in_the_engine_is_current(docker_sandbox):
    assert image.image_state(docker_sandbox.client, docker_sandbox.config.base_image) == "current"
    with pytest.raises(SandboxError, match="run `mirl image build`"):
        image.import_image(docker_sandbox.client, "mirl-test-none", rootfs=Path("/nonexistent"), force=True)


@pytest.mark.podman
@pytest.mark.timeout(300)
@pytest.mark.parametrize("via", ["sdk", "podman"])
def test_import_labels_the_image_and_reuses_it(docker_sandbox, tmp_path, via):
    if via == "podman" and shutil.which("podman") is None:
        missing("the podman CLI", "`apt-get install podman runc`")
    root = fake_rootfs(tmp_path / "rootfs")
    image.build_rootfs(root, PACKAGES)
    engine = docker_sandbox.client if via == "sdk" else "podman"
    name = f"mirl-test-import-{via}"
    try:
        info, what = image.import_image(engine, name, rootfs=root, force=True)
        assert what == "imported" and info.id and info.stamp == image.image_stamp(root)
        assert image.image_state(engine, name, root) == "current"
        assert image.import_image(engine, name, rootfs=root)[1] == "reused"
        container = docker_sandbox.client.containers.create(name, ["true"])  # never started: no shell in it
        try:
            bits, _ = container.get_archive("/hello.txt")
            assert b"hi\n" in b"".join(bits)
        finally:
            container.remove(force=True)
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True)
        try:
            docker_sandbox.client.images.remove(name, force=True)
        except Exception:
            pass


@pytest.mark.podman
def test_cli_status_and_build_reuse(docker_sandbox):
    import sys

    status = subprocess.run([sys.executable, "-m", "mirl", "image", "status"], capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert "rootfs" in status.stdout and "image mirl-base" in status.stdout and ": current" in status.stdout
    build = subprocess.run([sys.executable, "-m", "mirl", "image", "build"], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "rootfs" in build.stdout and "reused" in build.stdout
