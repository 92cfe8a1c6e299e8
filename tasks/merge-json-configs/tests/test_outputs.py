"""Compares /app/config/merged.json with the effective configuration under the stated merge rules."""

import json
from pathlib import Path

OUT = Path("/app/config/merged.json")
EXPECTED = json.loads(Path(__file__).with_name("expected.json").read_text())


def load():
    assert OUT.is_file(), f"{OUT} was not created"
    return json.loads(OUT.read_text())


def test_valid_json_object():
    assert isinstance(load(), dict)


def test_arrays_replaced_not_concatenated():
    got = load()
    assert got.get("features") == ["search"]
    assert got.get("admins") == ["ops@example.com", "root@example.com"]


def test_nulls_remove_keys():
    got = load()
    assert "metrics" not in got
    assert "timeout_s" not in got.get("database", {}).get("pool", {})
    assert "null" not in json.dumps(got)


def test_deep_merge_keeps_lower_keys():
    got = load()
    assert got.get("database", {}).get("pool") == {"min": 1, "max": 20}
    assert got.get("service") == {"name": "orders", "port": 8081, "workers": 8, "debug": True}


def test_whole_config_matches():
    assert load() == EXPECTED


def test_inputs_untouched():
    local = json.loads(Path("/app/config/local.json").read_text())
    assert local["metrics"] is None and local["features"] == ["search"]
