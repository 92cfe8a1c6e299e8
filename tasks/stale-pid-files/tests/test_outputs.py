"""Only the PID files of the running services remain, and removed.txt names the deleted ones."""
from pathlib import Path

RUN = Path("/app/run")
STALE = ["exporter.pid", "mailer.pid", "metrics.pid", "scheduler.pid", "web.pid"]


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cmdline(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_valid_files_kept_and_services_running():
    for name in ("cache", "queue"):
        f = RUN / f"{name}.pid"
        assert f.is_file(), f"{f} was deleted or the services were never started"
        pid = int(f.read_text().strip())
        assert alive(pid), f"{name} (pid {pid}) is not running"
        argv = cmdline(pid)
        assert b"--name" in argv and argv[argv.index(b"--name") + 1] == name.encode()


def test_stale_files_removed():
    assert sorted(p.name for p in RUN.glob("*.pid")) == ["cache.pid", "queue.pid"]


def test_removed_list():
    out = Path("/app/removed.txt")
    assert out.is_file(), "missing /app/removed.txt"
    assert [l.strip() for l in out.read_text().splitlines() if l.strip()] == STALE


def test_web_never_ran():
    # web has no configuration, so no live process may claim to be it (nothing was restarted by hand)
    for pid in filter(str.isdigit, (p.name for p in Path("/proc").iterdir())):
        try:
            argv = cmdline(pid)
        except OSError:
            continue
        if alive(pid) and b"--name" in argv:
            assert argv[argv.index(b"--name") + 1] != b"web"
