"""The catalog service is up on 8080, serving the shipped item list, logging to catalog.log."""
import json
import time
import urllib.request
from pathlib import Path

ITEMS = json.loads(Path("/app/service/items.json").read_text())


def get(path):
    last = None
    for _ in range(10):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:8080{path}", timeout=3) as r:
                return r.status, json.loads(r.read())
        except OSError as e:
            last = e
            time.sleep(0.3)
    raise AssertionError(f"nothing answers on port 8080: {last}")


def test_health():
    assert get("/health") == (200, {"status": "ok", "items": len(ITEMS)})


def test_items_served():
    status, body = get("/items")
    assert status == 200 and body == ITEMS
    assert get(f"/items/{ITEMS[3]['id']}") == (200, ITEMS[3])


def test_log_written():
    log = Path("/app/service/catalog.log")
    assert log.is_file() and "serving" in log.read_text()
