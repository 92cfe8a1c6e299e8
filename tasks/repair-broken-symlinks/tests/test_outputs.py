"""Checks each symlink under /app/site points where the reorganisation moved its target."""

import os
import subprocess
from pathlib import Path

import pytest

SITE = Path("/app/site")
REPAIRED = {
    "current": "releases/v1.4.0",
    "config/app.conf": "../shared/conf/app.conf",
    "public/static": "../shared/assets-2024",
    "bin/deploy": "../scripts/deploy-v2.sh",
}
UNCHANGED = {"previous": "releases/v1.3.2", "public/favicon.ico": "../shared/assets-2024/favicon.ico"}


def target(rel: str) -> str:
    p = SITE / rel
    assert p.is_symlink(), f"{p} must be a symlink"
    return os.path.normpath(os.readlink(p))


@pytest.mark.parametrize("rel", sorted(REPAIRED))
def test_repaired_link(rel):
    assert target(rel) == REPAIRED[rel]
    assert (SITE / rel).exists(), f"{rel} is still broken"


@pytest.mark.parametrize("rel", sorted(UNCHANGED))
def test_working_link_unchanged(rel):
    assert target(rel) == UNCHANGED[rel]


def test_deleted_target_link_removed():
    assert not os.path.lexists(SITE / "tmp/cache")
    assert (SITE / "tmp").is_dir()


def test_no_broken_links_left():
    broken = [str(p) for p in SITE.rglob("*") if p.is_symlink() and not p.exists()]
    assert not broken, f"still broken: {broken}"


def test_regular_files_in_place():
    assert (SITE / "releases/v1.4.0/index.html").read_text() == "<h1>shop v1.4.0</h1>\n"
    assert (SITE / "shared/conf/app.conf").is_file() and not (SITE / "shared/conf/app.conf").is_symlink()
    assert not (SITE / "releases/v1.4").exists() and not (SITE / "shared/assets").exists()


def test_deploy_runs():
    out = subprocess.run([str(SITE / "bin/deploy")], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.strip() == "deploying /app/site/releases/v1.4.0"
