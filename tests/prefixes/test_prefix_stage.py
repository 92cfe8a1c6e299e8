"""The prefix stage: sampling (held-out first, spread over environments) and the rerun check on a
real sandbox: exact, normalized (timestamps masked), and real divergences that no mask may hide."""

from __future__ import annotations

import json

import pytest
from recorded_runs import recorded_run

from mirl.params import make
from mirl.prefixes.stage import load_prefixes, run_prefixes, sample_prefixes, starts_processes
from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import Label

SCENARIOS = {
    "deterministic": ["echo hello", "printf 'a\\nb\\n' > f.txt", "cat f.txt"],
    "timestamp": ["date -u +%Y-%m-%dT%H:%M:%S.%N", "echo ok"],
    "random-content": ["head -c 12 /dev/urandom | base64 > r.txt", "cat r.txt"],
    "random-digest": ["head -c 64 /dev/urandom > r.bin", "md5sum r.bin"],  # a hex id that decides: never masked
}


def test_sampling_sets_held_out_aside_first_and_spreads_over_environments():
    steps = [ErrorStep(env=f"e{i % 4}", seed=0, step=i, rejected_command="x", reason="r") for i in range(40)]
    labels = [Label(s.id, ["m a"] + (["m b"] if i % 2 == 0 else [])) for i, s in enumerate(steps)]
    out = sample_prefixes(["m a", "m b"], labels, steps, per=8, heldout=4, seed=1)
    held = [p for p in out if p.split == "heldout"]
    train = [p for p in out if p.split == "train"]
    assert len([p for p in held if p.misbehavior == "m a"]) == 4 and len([p for p in train if p.misbehavior == "m a"]) == 8
    # held out for one misbehavior means never trained on, for any misbehavior
    assert not {p.error_id for p in held} & {p.error_id for p in train}
    # spread: 8 training prefixes of "m a" over 4 environments = 2 each
    envs = [p.env for p in train if p.misbehavior == "m a"]
    assert sorted(envs.count(e) for e in set(envs)) == [2, 2, 2, 2]
    again = sample_prefixes(["m a", "m b"], labels, steps, per=8, heldout=4, seed=1)
    assert [p.id for p in again] == [p.id for p in out]
    assert [p.id for p in sample_prefixes(["m a", "m b"], labels, steps, 8, 4, seed=2)] != [p.id for p in out]


def test_background_processes_are_recognised():
    assert starts_processes(["python3 -m http.server 8000 &"]) and starts_processes(["nohup ./run.sh"])
    assert starts_processes(["service nginx start"])
    assert not starts_processes(["ls && echo done", "grep a f | sort", "echo a&&b"])


@pytest.fixture(scope="module")
def bwrap():
    from mirl.sandbox.base import SandboxConfig, SandboxError
    from mirl.sandbox.select import make_sandbox
    from tests.real import missing

    try:
        from mirl.sandbox.bwrap_backend import available

        if not available():
            missing("bubblewrap or the base root filesystem")
        return make_sandbox(SandboxConfig(backend="bwrap"))
    except SandboxError as e:
        missing(f"the bwrap backend: {e}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rerun_check_modes_on_a_real_sandbox(tmp_path, bwrap, task_factory):
    run = tmp_path / "run"
    tasks = recorded_run(run, bwrap, task_factory, SCENARIOS)
    params = make(prefixes={"per_misbehavior": 1, "heldout_per_misbehavior": 0, "snapshot": False})
    summary = run_prefixes(params, run, sandbox=bwrap, tasks=list(tasks.values()), progress=False)
    got = {p.env: p for p in load_prefixes(run)}
    assert got["deterministic"].verdict == {"exact": True, "normalized": True, "snapshot": None}
    assert got["deterministic"].divergence is None
    assert got["timestamp"].verdict["exact"] is False and got["timestamp"].verdict["normalized"] is True
    assert got["timestamp"].masks == ["datetime"] and got["timestamp"].divergence["step"] == 0
    for name in ("random-content", "random-digest"):
        assert got[name].verdict["exact"] is False and got[name].verdict["normalized"] is False, name
        assert got[name].divergence["step"] == 1 and got[name].divergence["kind"] == "output"
        assert got[name].divergence["diff"].startswith("-")
    assert summary["all"] == {"sampled": 4, "environments": 4, "exact": 1, "normalized": 2, "snapshot": 0,
                              "errors": 0}
    train = [json.loads(line) for line in (run / "prefixes" / "train.jsonl").read_text().splitlines()]
    assert [p["env"] for p in train] == ["deterministic"]  # keep = exact
