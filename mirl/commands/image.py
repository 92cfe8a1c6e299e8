"""`mirl image build [--force] | status`: the local base image (rootfs + engine image)."""

from __future__ import annotations

import argparse
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("image", help="build or inspect the local base image that sandboxes start from")
    isub = p.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    b = isub.add_parser("build", help="build the base rootfs if missing and import it into a Docker-API engine")
    b.add_argument("--force", action="store_true", help="rebuild the rootfs and re-import the image")
    b.add_argument("--name", default="mirl-base", help="image name in the engine (default mirl-base)")
    b.add_argument("--no-engine", action="store_true", help="only build the rootfs (for the bwrap backend)")
    b.set_defaults(func=_build)
    s = isub.add_parser("status", help="show the rootfs, the engine and the imported image")
    s.add_argument("--name", default="mirl-base", help="image name in the engine (default mirl-base)")
    s.set_defaults(func=_status)


def _engine_client(start: bool):
    """(client or None, url or None, why-not)."""
    from mirl.sandbox.base import SandboxError
    from mirl.sandbox.docker_backend import connect
    from mirl.sandbox.podman import ensure_service, find_engine

    try:
        url = ensure_service(set_env=False) if start else find_engine()
        if url is None:
            return None, None, "no Docker-API engine answers (`mirl image build` starts podman's if installed)"
        return connect(start_podman=start), url, None
    except SandboxError as e:
        return None, None, str(e)


def _build(args) -> int:
    from mirl.sandbox import image
    from mirl.sandbox.base import SandboxError

    t0 = time.monotonic()
    try:
        path, what = image.build_rootfs(force=args.force)
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"rootfs {path}: {what} ({time.monotonic() - t0:.1f} s)")
    if args.no_engine:
        return 0
    t1 = time.monotonic()
    client, url, why = _engine_client(start=True)
    if client is None:
        print(f"engine: skipped ({why})")
        return 0
    try:
        info, what = image.import_image(client, args.name, path, force=args.force)
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"image {args.name} ({info.id[:19] if info.id else '?'}, {info.size / 2**20:.0f} MiB) on {url}: "
          f"{what} ({time.monotonic() - t1:.1f} s)")
    return 0


def _status(args) -> int:
    from mirl.sandbox import image

    path = image.rootfs_dir()
    state = image.rootfs_state(path)
    stamp = image.read_stamp(path) or {}
    print(f"rootfs {path}: {state}" + (f" (packages {stamp.get('packages_hash')}, {stamp.get('how')} {stamp.get('time')})" if stamp else ""))
    if state in ("stale", "missing"):
        missing = image.missing_packages(path) if state == "stale" else []
        hint = f"; missing packages: {', '.join(missing)}" if missing else ""
        print(f"  run `mirl image build` to (re)build it{hint}")
    client, url, why = _engine_client(start=False)
    if client is None:
        print(f"engine: {why}")
        return 0
    info = image.image_info(client, args.name)
    istate = image.image_state(client, args.name, path)
    if info.id:
        print(f"image {args.name} on {url}: {istate} ({info.id[:19]}, {info.size / 2**20:.0f} MiB)")
    else:
        print(f"image {args.name} on {url}: missing; run `mirl image build`")
    return 0
