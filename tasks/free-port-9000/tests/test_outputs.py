"""orders-v2 answers on 9000; the legacy holder is gone; the other host processes still run."""
import time
import urllib.request
from pathlib import Path

STATE = Path("/var/lib/hostsetup/pids")


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def started():
    assert STATE.is_file(), "setup.sh was never run"
    return {name: int(pid) for name, pid in (line.split() for line in STATE.read_text().splitlines())}


def test_orders_v2_on_9000():
    body = None
    for _ in range(10):
        try:
            with urllib.request.urlopen("http://127.0.0.1:9000/whoami", timeout=3) as r:
                body = r.read().decode().strip()
                break
        except OSError:
            time.sleep(0.3)
    assert body == "orders-v2"


def test_legacy_stopped_and_others_alive():
    pids = started()
    assert not alive(pids["orders_v1"])
    assert alive(pids["metrics_exporter"]), "metrics_exporter was stopped"
    assert alive(pids["cache_warmer"]), "cache_warmer was stopped"


def test_orders_log():
    log = Path("/app/service/orders.log")
    assert log.is_file() and "listening on port 9000" in log.read_text()
