"""A disk bound for a bwrap session: its overlay's writable layer on an ext4 image of `storage_mb`.

An upper directory on the host's filesystem can take all its free space (overlay quotas need XFS
project quotas, which ordinary hosts lack). An ext4 image of the task's size makes the kernel answer
ENOSPC at the bound instead. The image is sparse (only what is written takes host disk; making it
takes ~0.1 s). Its loop device is attached with autoclear and mounted only in the sandbox's private
mount namespace, so when the sandbox ends, or its owner is killed, the mount goes with the namespace
and the device detaches itself: nothing is left mounted or attached on the host.

Hosts without free loop devices or `mkfs.ext4` get `DiskUnavailable`; the caller then runs unbounded
and says so.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import subprocess
from pathlib import Path

# <linux/loop.h>
LOOP_SET_FD, LOOP_CLR_FD, LOOP_SET_STATUS64, LOOP_CONFIGURE = 0x4C00, 0x4C01, 0x4C04, 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_AUTOCLEAR = 4
LOOP_MAJOR = 7
INFO64 = struct.Struct("=QQQQQIIII64s64s32s2Q")  # struct loop_info64 (232 bytes)
CONFIG = struct.Struct("=II232s64x")  # struct loop_config: fd, block_size, loop_info64, 8 reserved u64
MIN_MB = 8  # the smallest ext4 image made; a task asking less gets this much
TRIES = 16  # a free device can be taken by another session between asking and attaching


class DiskUnavailable(Exception):
    """No bounded disk on this host (no loop device free, no mkfs.ext4, not root)."""


class LoopDisk:
    """An ext4 image attached to a loop device. The device stays attached while `fd` is open or while a
    mount holds it; `release()` closes `fd` once the sandbox has mounted it (or when it never will)."""

    def __init__(self, image: Path, device: str, fd: int, size_mb: int):
        self.image, self.device, self.fd, self.size_mb = image, device, fd, size_mb

    @classmethod
    def create(cls, image: Path, size_mb: int) -> LoopDisk:
        with open(image, "wb") as f:
            f.truncate(max(MIN_MB, int(size_mb)) << 20)
        try:
            r = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
                                "-E", "lazy_itable_init=1,nodiscard", str(image)], capture_output=True, text=True)
        except FileNotFoundError:
            raise DiskUnavailable("mkfs.ext4 is not installed (apt-get install e2fsprogs)") from None
        if r.returncode != 0:
            raise DiskUnavailable(f"mkfs.ext4 failed: {(r.stderr or r.stdout).strip()[-300:]}")
        backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(TRIES):
                device, fd = _free_device()
                try:
                    attached = _attach(fd, backing, str(image).encode()[:63])
                except OSError as e:
                    os.close(fd)
                    raise DiskUnavailable(f"attaching {image} to {device} failed: {e}") from None
                if attached:
                    return cls(image, device, fd, size_mb)
                os.close(fd)  # taken by another session meanwhile: ask again
            raise DiskUnavailable(f"no loop device stayed free in {TRIES} tries")
        finally:
            os.close(backing)

    def run_mounted(self, mountpoint: Path, argv: list[str]) -> subprocess.CompletedProcess:
        """Run `argv` with the disk mounted at `mountpoint` in a mount namespace of its own (gone when it
        exits): how a snapshot's files are put on the disk before the sandbox starts."""
        script = 'mount -t ext4 "$1" "$2" && shift 2 && exec "$@"'
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                               self.device, str(mountpoint), *argv], capture_output=True, text=True)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _attach(fd: int, backing: int, name: bytes) -> bool:
    """Attach `backing` to the loop device `fd` with autoclear; False when another took the device.

    LOOP_CONFIGURE (Linux 5.8+) sets autoclear in the same call, so no kill can leave the device
    attached for good; older kernels get LOOP_SET_FD then LOOP_SET_STATUS64, a short window."""
    info = INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0)
    try:
        fcntl.ioctl(fd, LOOP_CONFIGURE, CONFIG.pack(backing, 0, info))
        return True
    except OSError as e:
        if e.errno == errno.EBUSY:
            return False
        if e.errno not in (errno.EINVAL, errno.ENOTTY):
            raise
    try:
        fcntl.ioctl(fd, LOOP_SET_FD, backing)
    except OSError as e:
        if e.errno == errno.EBUSY:
            return False
        raise
    try:
        fcntl.ioctl(fd, LOOP_SET_STATUS64, info)
    except OSError:
        fcntl.ioctl(fd, LOOP_CLR_FD, 0)
        raise
    return True


def attached() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device (a deleted file reads "<path> (deleted)")."""
    out = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            out.append((f"/dev/{backing.parts[-3]}", backing.read_text().strip()))
        except OSError:
            continue  # detached meanwhile
    return out


def stale_devices(under: Path) -> list[str]:
    """Loop devices whose backing file lies under `under` (a dead session's temp dir)."""
    return [device for device, name in attached() if name.startswith(f"{under}/")]


def detach(device: str) -> None:
    """Detach a loop device nothing holds (a session killed before autoclear was set)."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.ioctl(fd, LOOP_CLR_FD, 0)
    except OSError:
        pass  # in use after all, or gone: autoclear or its holder ends it
    finally:
        os.close(fd)


def _free_device() -> tuple[str, int]:
    try:
        ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise DiskUnavailable(f"no /dev/loop-control ({e.strerror})") from None
    try:
        n = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
    except OSError as e:
        raise DiskUnavailable(f"no free loop device ({e.strerror})") from None
    finally:
        os.close(ctl)
    device = f"/dev/loop{n}"
    if not os.path.exists(device):  # a container's static /dev lacks the nodes the kernel adds on demand
        try:
            major, minor = (int(x) for x in Path(f"/sys/class/block/loop{n}/dev").read_text().split(":"))
        except (OSError, ValueError):
            major, minor = LOOP_MAJOR, n
        try:
            os.mknod(device, stat.S_IFBLK | 0o660, os.makedev(major, minor))
        except FileExistsError:  # another session made it first
            pass
        except OSError as e:
            raise DiskUnavailable(f"{device} is not in /dev and cannot be made ({e.strerror})") from None
    try:
        return device, os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise DiskUnavailable(f"cannot open {device} ({e.strerror})") from None
