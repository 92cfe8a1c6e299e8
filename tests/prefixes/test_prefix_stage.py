"""The prefix stage: sampling (training first, held-out candidates checked in waves, spread over environments) and
the rerun check on a
real sandbox: exact, normalized (timestamps masked), and real divergences that no mask may hide."""

from __future__ import annotations

import json

import pytest
from recorded_runs import recorded_run

from mirl.params import make
from mirl.prefixes.stage import heldout_waves, run_prefixes, sample_prefixes, starts_processes
from mirl.records.error_step import ErrorStep
from mirl.records.prefix import Prefix
from mirl.records.taxonomy import Label
from mirl.runner.inputs import load_prefixes

SCENARIOS = {
    "deterministic": ["echo hello", "printf 'a\\nb\\n' > f.txt", "cat f.txt"],
    "timestamp": ["date -u +%Y-%m-%dT%H:%M:%S.%N", "echo ok"],
    "random-content": ["head -c 12 /dev/urandom | base64 > r.txt", "cat r.txt"],
    "random-digest": ["head -c 64 /dev/urandom > r.bin", "md5sum r.bin"],  # a hex id that decides: never masked
}


def test_sampling_sets_the_first_held_out_candidates_aside_and_queues_the_rest_training_leaves():
    steps = [ErrorStep(env=f"e{i % 4}", seed=0, step=i, rejected_command="x", reason="r") for i in range(40)]
    labels = [Label(s.id, ["m a"] + (["m b"] if i % 2 == 0 else [])) for i, s in enumerate(steps)]
    out = sample_prefixes(["m a", "m b"], labels, steps, per=8, heldout=4, seed=1)
    held = [p for p in out if p.split == "heldout"]
    train = [p for p in out if p.split == "train"]
    assert len([p for p in train if p.misbehavior == "m a"]) == 8 and len([p for p in train if p.misbehavior == "m b"]) == 8
    # the held-out queue of a misbehavior is every error step carrying it that no training prefix uses
    trained = {p.error_id for p in train}
    assert {p.error_id for p in held if p.misbehavior == "m a"} == {s.id for s in steps} - trained
    assert {p.error_id for p in held if p.misbehavior == "m b"} == {s.id for i, s in enumerate(steps) if i % 2 == 0} - trained
    # spread: 8 training prefixes of "m a" over 4 environments = 2 each, and the queue goes round the environments
    envs = [p.env for p in train if p.misbehavior == "m a"]
    assert sorted(envs.count(e) for e in set(envs)) == [2, 2, 2, 2]
    assert len({p.env for p in [p for p in held if p.misbehavior == "m a"][:4]}) == 4
    again = sample_prefixes(["m a", "m b"], labels, steps, per=8, heldout=4, seed=1)
    assert [p.id for p in again] == [p.id for p in out]
    assert [p.id for p in sample_prefixes(["m a", "m b"], labels, steps, 8, 4, seed=2)] != [p.id for p in out]
    assert all(p.split == "train" for p in sample_prefixes(["m a"], labels, steps, 8, 0, seed=1))
    # a small run: the first held-out candidate of each misbehavior is set aside before training takes the rest
    few = sample_prefixes(["m a"], labels[:3], steps[:3], per=8, heldout=1, seed=1)
    assert [p.split for p in few].count("train") == 2 and [p.split for p in few].count("heldout") == 1


def test_a_held_out_prefix_never_starts_where_a_training_prefix_does():
    """A step-0 error of two seeds of one environment: both prefixes are the task alone, one start.
    The paper's held-out prefixes are unseen in training, so the start is one split's only."""
    from mirl.prefixes.stage import prefix_start
    from mirl.records.trajectory import Step, Trajectory

    steps = [ErrorStep(env=f"e{i}", seed=seed, step=0, rejected_command="x", reason="r") for i in range(4) for seed in (0, 1)]
    steps += [ErrorStep(env="e0", seed=2, step=1, rejected_command="x", reason="r")]  # after a step of its own
    trajs = {(s.env, s.seed): Trajectory(task=s.env, seed=s.seed, models={}, instruction="i",
                                         steps=[Step(reasoning="", command=f"ls {s.seed}", output="", exit_code=0)])
             for s in steps}
    labels = [Label(s.id, ["m"]) for s in steps]
    start = prefix_start(trajs)
    for seed in range(20):
        out = sample_prefixes(["m"], labels, steps, per=3, heldout=2, seed=seed, start=start)
        train = {start(next(s for s in steps if s.id == p.error_id)) for p in out if p.split == "train"}
        held = [start(next(s for s in steps if s.id == p.error_id)) for p in out if p.split == "heldout"]
        assert train and held and not train & set(held), seed
    # without `start`, two error steps are two prefixes (the ids): a seed where the same start is in both
    leaks = [seed for seed in range(20) if (lambda out: {p.env for p in out if p.split == "train" and p.steps == 0}
             & {p.env for p in out if p.split == "heldout" and p.steps == 0})(
                 sample_prefixes(["m"], labels, steps, per=3, heldout=2, seed=seed))]
    assert leaks


def test_held_out_waves_check_until_enough_are_kept_or_the_queue_is_used_up():
    queue = [Prefix(id=f"m|{i}", misbehavior="m", error_id=str(i), env="e", seed=0, steps=1, split="heldout")
             for i in range(6)]
    good = {0, 2, 3, 5}  # which candidates pass the rerun check

    def checked(ids):
        return {queue[i].id: Prefix.from_dict({**queue[i].to_dict(), "verdict": {"exact": i in good}}) for i in ids}

    ids = lambda head: [int(p.error_id) for p in head]  # noqa: E731
    assert ids(heldout_waves(queue, {}, 3, "exact")) == [0, 1, 2]  # first wave: as many as wanted
    assert ids(heldout_waves(queue, checked([0, 1]), 3, "exact")) == [0, 1, 2]  # a wave not yet checked: no more
    assert ids(heldout_waves(queue, checked([0, 1, 2]), 3, "exact")) == [0, 1, 2, 3]  # 2 kept: one more
    assert ids(heldout_waves(queue, checked([0, 1, 2, 3]), 3, "exact")) == [0, 1, 2, 3]  # 3 kept: done
    assert ids(heldout_waves(queue, checked(range(6)), 5, "exact")) == [0, 1, 2, 3, 4, 5]  # 4 of 5: exhausted
    assert heldout_waves(queue, {}, 0, "exact") == []


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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_check_the_sandbox_could_not_run_is_checked_again_not_dropped(tmp_path, bwrap, task_factory):
    """A sandbox that did not start says nothing about the prefix: it is an error, the stage is not
    complete, and the next run checks it again (it is not a prefix that failed to reproduce)."""
    from mirl.sandbox.base import SandboxError

    class Down:
        name, config = bwrap.name, bwrap.config

        def start(self, task, snapshot=None):
            raise SandboxError("the engine is not answering")

    run = tmp_path / "run"
    tasks = recorded_run(run, bwrap, task_factory, {"deterministic": SCENARIOS["deterministic"]})
    params = make(prefixes={"per_misbehavior": 1, "heldout_per_misbehavior": 0, "snapshot": False})
    down = run_prefixes(params, run, sandbox=Down(), tasks=list(tasks.values()), progress=False)
    assert down["errors"] == 1 and not down["complete"] and "failed" in down["stopped"]
    up = run_prefixes(params, run, sandbox=bwrap, tasks=list(tasks.values()), progress=False)
    assert up["errors"] == 0 and up["complete"] and up["all"]["exact"] == 1
    assert [p.verdict["exact"] for p in load_prefixes(run)] == [True]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_runs_the_tests_at_each_reproduced_prefix_and_counts_those_that_pass(tmp_path, bwrap, task_factory):
    """With `prefixes.verify`, a prefix whose state already passes the tests is marked so (r_o from it is 1
    whatever the policy does that keeps the state); one that diverged is not tested; without it, none is."""
    passes_if_done = ("#!/bin/bash\nif [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    scenarios = {"done": ["echo ok > /app/done.txt", "cat /app/done.txt"], "not-done": ["echo hello"],
                 "diverged": ["head -c 12 /dev/urandom | base64 > /app/done.txt", "cat /app/done.txt"]}
    run = tmp_path / "run"
    tasks = recorded_run(run, bwrap, lambda name: task_factory(name, test_sh=passes_if_done), scenarios, misbehavior="m")
    params = make(prefixes={"per_misbehavior": 3, "heldout_per_misbehavior": 0, "snapshot": True, "verify": True})
    summary = run_prefixes(params, run, sandbox=bwrap, tasks=list(tasks.values()), progress=False)
    got = {p.env: p for p in load_prefixes(run)}
    assert got["done"].passes is True and got["not-done"].passes is False and got["diverged"].passes is None
    assert got["done"].restore["verify_s"] > 0
    assert summary["passing"] == {"train": {"m": {"passing": 1, "verified": 2}}}
    # the snapshot a training start restores was saved before the tests ran: none of their files in it
    with bwrap.start(tasks["done"], snapshot=got["done"].restore["snapshot"]) as restored:
        assert restored.run("cat /app/done.txt; ls /logs/verifier /tests 2>&1 | grep -c reward", timeout=30).output.split() == [
            "ok", "0"]
    from mirl.prefixes.stage import PrefixStage

    off = make(prefixes={"per_misbehavior": 3, "heldout_per_misbehavior": 0, "snapshot": False})
    assert "verify" not in PrefixStage(off, run).fingerprint()["prefixes"]  # runs from before the key resume
    summary = run_prefixes(off, run, sandbox=bwrap, tasks=list(tasks.values()), progress=False, force=True)
    assert all(p.passes is None for p in load_prefixes(run)) and "passing" not in summary


HELD = {f"stable-{i}": ["echo hello", f"printf '{i}\\n' > f.txt", "cat f.txt"] for i in range(2)}
HELD |= {f"random-{i}": ["head -c 12 /dev/urandom | base64 > r.txt", "cat r.txt"] for i in range(3)}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("want", [2, 3])
def test_held_out_prefixes_are_counted_after_the_rerun_check(tmp_path, bwrap, task_factory, want):
    """Five candidates of one misbehavior, two of which reproduce: wanting 2, the stage checks the queue
    until both are kept; wanting 3, it checks all five and says the queue was exhausted."""
    run = tmp_path / "run"
    tasks = recorded_run(run, bwrap, task_factory, HELD, misbehavior="m")
    params = make(prefixes={"per_misbehavior": 0, "heldout_per_misbehavior": want, "snapshot": False, "workers": 2})
    summary = run_prefixes(params, run, sandbox=bwrap, tasks=list(tasks.values()), progress=False)
    queue = [json.loads(line)["env"] for line in (run / "prefixes" / "sampled.jsonl").read_text().splitlines()]
    stable = [i for i, env in enumerate(queue) if env.startswith("stable")]
    checked = [p.env for p in load_prefixes(run)]
    kept = [p.env for p in load_prefixes(run, "heldout.jsonl")]
    if want == 2:  # the queue's head up to the second candidate that reproduces, and no further
        assert checked == queue[:stable[1] + 1] and sorted(kept) == ["stable-0", "stable-1"]
        assert summary["heldout_status"]["m"] == {"candidates": 5, "checked": stable[1] + 1, "kept": 2, "wanted": 2,
                                                  "status": "kept 2"}
    else:
        assert checked == queue and len(kept) == 2
        assert summary["heldout_status"]["m"]["status"] == "exhausted"
    assert summary["heldout"]["exact"] == 2 and summary["complete"]
