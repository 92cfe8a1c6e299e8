"""The ledger sums to the calls made; budgets stop calls before they happen; keys are never written."""

from __future__ import annotations

import threading

import pytest

from mirl.llm.errors import BudgetExceeded, LLMError
from mirl.llm.ledger import COLUMNS, Ledger, read_ledger, summarize

from .conftest import USER

PRICE = {"input": 3.0, "cached_input": 0.3, "output": 15.0}  # USD per million tokens


def test_tokens_and_cost_match_the_calls(scripted, make_client):
    _, name = scripted(lambda msgs: "ok " * 10)  # 10 output words per sample
    client = make_client({"localizer": name, "teacher": name}, prices={name: PRICE})
    prompts = [[{"role": "user", "content": " ".join(["w"] * k)}] for k in (5, 7, 9)]
    for p in prompts:
        client.complete("localizer", p)
    client.complete("teacher", [{"role": "user", "content": "w w w w"}], n=3)
    df = read_ledger(client.run_dir)
    assert list(df.columns)[: len(COLUMNS)] == COLUMNS
    assert df["input_tokens"].sum() == 5 + 7 + 9 + 4  # one request for the 3 teacher samples
    assert df["output_tokens"].sum() == 10 * 3 + 10 * 3
    expected = ((5 + 7 + 9 + 4) * 3.0 + 60 * 15.0) / 1e6
    assert df["cost_usd"].sum() == pytest.approx(expected)
    assert set(df["price"]) == {"table"}
    s = summarize(client.run_dir).set_index("role")
    assert s.loc["localizer", "calls"] == 3 and s.loc["teacher", "output_tokens"] == 30
    assert s["cost_usd"].sum() == pytest.approx(expected)


def test_unpriced_self_hosted_model_costs_zero_and_says_so(scripted, make_client):
    _, name = scripted(["free"])
    client = make_client({"policy": name})
    client.complete("policy", USER)
    row = read_ledger(client.run_dir).iloc[0]
    assert row["cost_usd"] == 0 and row["price"] == "none"


def test_run_budget_stops_between_calls(scripted, make_client):
    model, name = scripted(lambda msgs: "word " * 100)
    # each call: 7 input + 100 output tokens at $10k/M output = $1.00 + tiny input cost
    client = make_client({"policy": name}, prices={name: {"input": 1.0, "output": 10_000.0}}, budget_usd=2.0)
    client.complete("policy", USER, sample_offset=0)
    client.complete("policy", USER, sample_offset=1)
    with pytest.raises(BudgetExceeded) as err:
        client.complete("policy", USER, sample_offset=2)
    assert isinstance(err.value, LLMError) and err.value.kind == "budget"
    per_call = (7 * 1.0 + 100 * 10_000.0) / 1e6  # USER is 7 words, the reply 100: the scripted model counts words
    assert err.value.spent_usd == pytest.approx(2 * per_call) and err.value.cap_usd == 2.0
    assert len(model.calls) == 2  # nothing was sent
    # cache hits are free, so they are still served past the cap
    assert client.complete("policy", USER)[0].cache_hit
    df = read_ledger(client.run_dir)
    assert list(df["error"].fillna("")) == ["", "", f"budget: run spent ${2 * per_call:.4f} of its $2.0000 budget", ""]
    assert df["cost_usd"].sum() == pytest.approx(2 * per_call) and list(df["cache_hit"]) == [False, False, False, True]


def test_stage_budget_counts_only_its_stage(scripted, make_client, tmp_path):
    _, name = scripted(lambda msgs: "word " * 100)
    cfg = dict(prices={name: {"output": 10_000.0}}, stage_budget_usd={"profiling": 0.5})
    run = tmp_path / "shared"
    make_client({"policy": name}, stage="other", run_dir=run, **cfg).complete("policy", USER)
    profile = make_client({"policy": name}, stage="profiling", run_dir=run, **cfg)
    profile.complete("policy", USER, sample_offset=1)  # other stage's $1 does not count
    with pytest.raises(BudgetExceeded, match="stage 'profiling' spent \\$1.0000 of its \\$0.5000"):
        profile.complete("policy", USER, sample_offset=2)


def test_ledger_spend_survives_reopen_and_threads(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    threads = [threading.Thread(target=lambda: [led.record(role="policy", stage="s", model="m", cost_usd=0.25)
                                                for _ in range(20)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert led.spent() == pytest.approx(20.0)
    again = Ledger(tmp_path / "l.jsonl")
    assert again.spent("s") == pytest.approx(20.0)
    assert len((tmp_path / "l.jsonl").read_text().splitlines()) == 80


def test_each_row_is_synced_to_disk_outside_the_locks(tmp_path, monkeypatch):
    """Durable row by row, yet 64 episode threads' syncs overlap instead of queueing behind one lock."""
    import fcntl
    import os

    from mirl.llm import ledger as ledger_mod

    led = Ledger(tmp_path / "llm_calls.jsonl")
    synced: list[tuple[bool, bool, int, int]] = []
    real_fsync = os.fsync

    def fsync(fd):
        flock_free = False
        other = os.open(led.path, os.O_RDONLY)
        try:  # another descriptor gets the file's flock at once only if this one no longer holds it
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            flock_free = True
        except BlockingIOError:
            pass
        finally:
            os.close(other)
        st = os.fstat(fd)  # what is synced: the ledger's file, with the row in it
        synced.append((led._lock.locked(), flock_free, st.st_ino, st.st_size))
        real_fsync(fd)

    monkeypatch.setattr(ledger_mod.os, "fsync", fsync)
    sizes = []
    for cost in (0.5, 0.25):
        led.record(role="policy", stage="s", model="m", cost_usd=cost)
        sizes.append(led.path.stat().st_size)
    ino = led.path.stat().st_ino
    assert synced == [(False, True, ino, sizes[0]), (False, True, ino, sizes[1])]
    assert led.spent() == pytest.approx(0.75) and len(read_ledger(tmp_path)) == 2


def test_a_row_cut_short_by_the_disk_is_an_error_and_leaves_no_part_of_it(tmp_path, monkeypatch):
    import os

    from mirl.llm import ledger as ledger_mod

    led = Ledger(tmp_path / "llm_calls.jsonl")
    led.record(role="policy", stage="s", model="m", cost_usd=0.5)
    whole = led.path.read_bytes()
    real_write = os.write
    monkeypatch.setattr(ledger_mod.os, "write", lambda fd, data: real_write(fd, data[:10]))
    with pytest.raises(OSError, match="wrote 10 of a row's"):
        led.record(role="policy", stage="s", model="m", cost_usd=0.25)
    monkeypatch.setattr(ledger_mod.os, "write", real_write)
    assert led.path.read_bytes() == whole
    led.record(role="policy", stage="s", model="m", cost_usd=0.25)
    assert led.spent() == pytest.approx(0.75) and len(read_ledger(tmp_path)) == 2


def test_a_run_directory_deleted_and_made_again_is_counted_afresh(tmp_path):
    """The process-wide ledger of a path outlives its file (a notebook kernel, a run deleted and
    started again): what it counts is the file as it is now, so the new run's budget still stops it."""
    import shutil

    from mirl.llm.ledger import open_ledger

    run = tmp_path / "run"
    led = open_ledger(run)
    for _ in range(3):
        led.record(role="policy", stage="s", model="m", cost_usd=1.0)
    assert led.spent("s") == 3.0
    shutil.rmtree(run)
    assert open_ledger(run) is led and led.spent() == 0.0  # the file is gone: nothing spent
    led.record(role="policy", stage="s", model="m", cost_usd=0.5)
    assert led.spent("s") == 0.5  # the new file's row, counted once, from its start
    shutil.rmtree(run)
    run.mkdir()
    (run / "llm_calls.jsonl").write_text('{"stage": "s", "cost_usd": 2.0}\n' * 4)  # a new file
    assert led.spent("s") == 8.0
    (run / "llm_calls.jsonl").write_text('{"stage": "s", "cost_usd": 2.0}\n')  # cut shorter in place
    assert led.spent("s") == 2.0
    (run / "llm_calls.jsonl").write_text('{"stage": "s", "cost_usd": 3.0}\n' * 5)  # rewritten in place, longer
    assert led.spent("s") == 15.0
    led.record(role="policy", stage="s", model="m", cost_usd=1.0)  # and appends go on being counted once
    assert led.spent("s") == 16.0


def test_read_ledger_of_empty_run(tmp_path):
    df = read_ledger(tmp_path)
    assert df.empty and set(COLUMNS) <= set(df.columns)
    assert summarize(tmp_path).empty


def test_api_key_is_never_written(scripted, make_client, monkeypatch, tmp_path):
    secret = "sk-test-DO-NOT-LEAK-0123456789"
    monkeypatch.setenv("MIRL_TEST_KEY", secret)

    def leaky(msgs):  # a provider error that echoes the key back, as some SDKs do
        raise RuntimeError(f"request failed with key {secret}")

    _, good = scripted(["fine answer"])
    _, bad = scripted(leaky)
    client = make_client({"policy": good, "teacher": bad}, run_dir=tmp_path / "run", max_tries=2)
    client.config.policy.api_key_env = "MIRL_TEST_KEY"
    client.config.teacher.api_key_env = "MIRL_TEST_KEY"
    client.complete("policy", USER)
    client.complete("policy", USER)  # a cache hit too
    with pytest.raises(LLMError) as err:
        client.complete("teacher", USER)
    assert secret not in str(err.value)
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert any(p.name == "llm_calls.jsonl" for p in written) and any(p.suffix == ".json" for p in written)
    for p in written:
        assert secret not in p.read_text(), f"key leaked into {p}"


def test_missing_key_variable_is_a_clear_auth_error(scripted, make_client, monkeypatch):
    monkeypatch.delenv("MIRL_TEST_ABSENT_KEY", raising=False)
    _, name = scripted(["x"])
    client = make_client({"policy": name})
    client.config.policy.api_key_env = "MIRL_TEST_ABSENT_KEY"
    with pytest.raises(LLMError, match="MIRL_TEST_ABSENT_KEY.*is not set") as err:
        client.complete("policy", USER)
    assert err.value.kind == "auth"


def test_client_is_safe_to_share_between_threads(scripted, make_client):
    _, name = scripted(lambda msgs: f"answer to {msgs[-1]['content']}")
    client = make_client({"annotator": name}, prices={name: PRICE})
    results: dict[int, str] = {}

    def work(k):
        results[k] = client.complete("annotator", [{"role": "user", "content": f"batch {k}"}])[0].text

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: f"answer to batch {k}" for k in range(8)}
    df = read_ledger(client.run_dir)
    assert len(df) == 8 and client.ledger.spent() == pytest.approx(df["cost_usd"].sum())


def test_hosted_model_is_priced_from_litellms_map(make_client):
    # litellm's mock_response answers without a network; usage and price go through the real path
    client = make_client({"rubric_judge": "openai/gpt-4o"})
    [c] = client.complete("rubric_judge", USER, mock_response="It passes.")
    assert c.text == "It passes."
    row = read_ledger(client.run_dir).iloc[0]
    assert row["price"] == "litellm" and row["cost_usd"] > 0
    import litellm

    expected = sum(litellm.cost_per_token(model="openai/gpt-4o", prompt_tokens=int(row["input_tokens"]),
                                          completion_tokens=int(row["output_tokens"])))
    assert row["cost_usd"] == pytest.approx(expected)
