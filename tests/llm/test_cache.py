"""Repeated calls are free and identical; each sample index is stored on its own."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from mirl.llm.cache import DiskCache, request_key, sample_key
from mirl.llm.ledger import read_ledger
from mirl.llm.types import Completion

from .conftest import USER

PRICES = {"input": 1.0, "output": 2.0}


def test_second_identical_call_is_a_free_hit(scripted, make_client):
    model, name = scripted(["run ls -la now", "something else"])
    client = make_client({"policy": name}, prices={name: PRICES})
    [a] = client.complete("policy", USER)
    [b] = client.complete("policy", USER)
    assert a.text == b.text == "run ls -la now"
    assert not a.cache_hit and b.cache_hit and b.cost_usd == 0.0
    assert a.cost_usd == pytest.approx((7 * 1.0 + 4 * 2.0) / 1e6)  # 7 prompt words, 4 reply words
    assert model.remaining == 1  # the model was asked once
    rows = read_ledger(client.run_dir)
    assert list(rows["cache_hit"]) == [False, True]
    assert rows.iloc[1]["cost_usd"] == 0 and rows.iloc[1]["output_tokens"] == 0


def test_new_client_same_run_dir_reuses_the_cache(scripted, make_client, tmp_path):
    model, name = scripted(["one", "two"])
    make_client({"policy": name}, run_dir=tmp_path / "r").complete("policy", USER)
    [again] = make_client({"policy": name}, run_dir=tmp_path / "r").complete("policy", USER)
    assert again.text == "one" and again.cache_hit and model.remaining == 1


def test_n4_after_n2_samples_only_two_more(scripted, make_client):
    model, name = scripted(["s0", "s1", "s2", "s3", "s4"])
    client = make_client({"policy": name})
    first = client.complete("policy", USER, n=2)
    more = client.complete("policy", USER, n=4)
    assert [c.text for c in first] == ["s0", "s1"]
    assert [c.text for c in more] == ["s0", "s1", "s2", "s3"]
    assert [c.cache_hit for c in more] == [True, True, False, False]
    assert model.remaining == 1
    rows = read_ledger(client.run_dir)
    assert list(rows["n"]) == [2, 2, 2]  # request of 2, hit of 2, request of the 2 missing


def test_sample_offset_and_params_change_the_key(scripted, make_client):
    model, name = scripted(["a", "b", "c"])
    client = make_client({"policy": name})
    [a] = client.complete("policy", USER)
    [b] = client.complete("policy", USER, sample_offset=1)
    [c] = client.complete("policy", USER, temperature=0.2)
    assert (a.text, b.text, c.text) == ("a", "b", "c")
    assert b.sample_index == 1


def test_cache_off_always_asks(scripted, make_client):
    model, name = scripted(["a", "b"])
    client = make_client({"policy": name}, cache=False)
    assert [client.complete("policy", USER)[0].text for _ in range(2)] == ["a", "b"]


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path):
    cache = DiskCache(tmp_path / "c")
    key = sample_key(request_key("m", USER, {"temperature": 1.0}), 0)
    cache.put(key, Completion(text="x" * 10_000, model="m"))
    cache.put(key, Completion(text="y", model="m"))  # overwrite in place
    files = list((tmp_path / "c").rglob("*"))
    assert [f.name for f in files if f.is_file()] == [f"{key}.json"]
    assert cache.get(key).text == "y"
    # a torn file (e.g. written by something else) reads as a miss, not a crash
    (tmp_path / "c" / key[:2] / f"{key}.json").write_text('{"completion": {"te')
    assert cache.get(key) is None


def test_key_covers_model_messages_params_and_index():
    base = request_key("m", USER, {"temperature": 1.0, "seed": 0})
    assert base == request_key("m", [dict(USER[0])], {"seed": 0, "temperature": 1.0})
    assert base != request_key("m2", USER, {"temperature": 1.0, "seed": 0})
    assert base != request_key("m", USER, {"temperature": 1.0, "seed": 1})
    assert base != request_key("m", USER + USER, {"temperature": 1.0, "seed": 0})
    assert base != request_key("m", USER, {"temperature": 1.0, "seed": 0}, api_base="http://x")
    assert sample_key(base, 0) != sample_key(base, 1)
    json.dumps(asdict(Completion(text="t")))  # completions are JSON-storable
