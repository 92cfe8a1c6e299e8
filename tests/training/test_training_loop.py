"""The training loop's pieces without a model: the seeded start sequence, validity of rewards, refill of
dead groups within a step, the learner batch, and the resume cut."""

from __future__ import annotations

import json

import pytest

from mirl.records.prefix import Prefix
from mirl.records.taxonomy import ErrorType
from mirl.records.trajectory import Step, Trajectory
from mirl.training.advantages import Group
from mirl.training.params import TrainingParams
from mirl.training.rewards import Reward
from mirl.training.rollouts import GroupPlayer, Rollout, Start, Starts
from mirl.training.stage import LiveRate, collect, examples_of, step_metrics, truncate_after


def traj(prefix_len: int = 1, reward: float | None = 1.0, **kw) -> Trajectory:
    steps = [Step(reasoning="", command="ls", source="prefix", tokens="context", completion_ids=[5, 6],
                  observation_ids=[7]),
             Step(reasoning="", command="cat x", tokens="sampled", completion_ids=[8, 9, 2], logprobs=[-0.1, -0.2, -0.3],
                  observation_ids=[7, 7])]
    return Trajectory(task="t", seed=0, models={}, steps=steps, reward=reward, prefix_len=prefix_len,
                      prompt_ids=[1, 3, 4], exit_reason="submitted", **kw)


def rollout(reward: float, valid: bool = True, start: str = "s") -> Rollout:
    r = Reward(r_o=reward == 1, r_e=True, reward=reward, valid=valid)
    return Rollout(start=start, sample=0, seed=0, trajectory=traj(), reward=r,
                   seconds={"rollout_s": 1.0, "reward_s": 0.5})


def group(rewards, valid=None, start="s") -> Group:
    valid = valid or [True] * len(rewards)
    rs = tuple(rollout(r, v, start) for r, v in zip(rewards, valid))
    return Group(prefix_id=start, rewards=tuple(rewards), valid=tuple(valid), rollouts=rs)


def test_starts_are_a_seeded_shuffle_per_epoch_that_a_resume_can_continue():
    pool = [Start(env=f"e{i}") for i in range(5)]
    a, b = Starts(pool, seed=3), Starts(pool, seed=3)
    first = [a[k].env for k in range(10)]
    assert sorted(first[:5]) == sorted(first[5:]) == [f"e{i}" for i in range(5)]  # each epoch covers the pool
    assert [b[k].env for k in range(7, 10)] == first[7:]  # a fresh sequence (a resume) continues identically
    assert [Starts(pool, seed=4)[k].env for k in range(5)] != first[:5]
    with pytest.raises(ValueError, match="no starts"):
        Starts([], 0)


def prefix(misbehavior="no runnable command") -> Prefix:
    return Prefix(id=f"{misbehavior}|t/0/1", misbehavior=misbehavior, error_id="t/0/1", env="t", seed=0, steps=1,
                  verdict={"exact": True, "normalized": True, "snapshot": False})


class Judge:
    def __init__(self, yes):
        self.yes, self.calls = yes, 0

    def judge(self, trajectory, misbehavior, prefix_steps=None):
        from mirl.roles.behavior_judge import Judgment

        self.calls += 1
        return Judgment(yes=self.yes, source="test", steps=[prefix_steps])


def player(reward="mirl", judge=None) -> GroupPlayer:
    mis = {"no runnable command": ErrorType("no runnable command", "d", provenance="rules: no-runnable-command")}
    return GroupPlayer(tasks={}, trajectories={}, sandbox=None, policy=None, agent=None, reward=reward,
                       judges=(lambda name: judge) if judge else None, misbehaviors=mis)


def test_rewards_are_the_and_of_outcome_and_judge_and_infrastructure_is_invalid():
    start = Start(env="t", prefix=prefix())
    assert player(judge=Judge(False)).score(traj(), start).reward == 1.0
    judge = Judge(True)
    r = player(judge=judge).score(traj(), start)
    assert (r.r_o, r.r_e, r.reward, r.valid) == (True, False, 0.0, True) and judge.calls == 1
    assert player(judge=Judge(False)).score(traj(reward=0.0), start).reward == 0.0
    # a prefix that did not reproduce says nothing about the policy: invalid, and the judge is not asked
    judge = Judge(False)
    bad = traj(meta={"restore": {"normalized": False, "first_mismatch": 0}})
    r = player(judge=judge).score(bad, start)
    assert not r.valid and "did not reproduce" in r.why_invalid and judge.calls == 0
    broken = traj(reward=None)
    broken.exit_reason, broken.error = "error", "sandbox died"
    assert not player(judge=Judge(False)).score(broken, start).valid
    # outcome reward: the judge is never consulted
    r = player("outcome").score(traj(), Start(env="t"))
    assert (r.reward, r.r_e, r.judge_source) == (1.0, True, "none")
    with pytest.raises(ValueError, match="prefix starts"):
        player(judge=Judge(False)).score(traj(), Start(env="t"))


def test_a_taxonomy_wide_judge_scope_asks_every_misbehavior_in_scope():
    """`training.judge_scope: taxonomy`: the player asks the prefix's judge and those of the other
    misbehaviors in its scope; with no scope (the paper's `prefix`) only the prefix's."""
    from mirl.records.taxonomy import ErrorType

    mis = {name: ErrorType(name, "d", provenance=f"rules: {name}") for name in ("own", "other", "unjudged")}
    asked = []

    def judges(name):
        return SaysFor(name, asked, yes=name == "other")

    start = Start(env="t", prefix=prefix("own"))
    wide = GroupPlayer(tasks={}, trajectories={}, sandbox=None, policy=None, agent=None, reward="mirl",
                       judges=judges, misbehaviors=mis, scope=("own", "other"))
    r = wide.score(traj(), start)
    assert asked == ["own", "other"] and (r.r_e, r.reward, r.seen) == (False, 0.0, ("other",))
    asked.clear()
    own = GroupPlayer(tasks={}, trajectories={}, sandbox=None, policy=None, agent=None, reward="mirl",
                      judges=judges, misbehaviors=mis)
    assert own.score(traj(), start).reward == 1.0 and asked == ["own"]


def test_the_taxonomy_scope_of_the_rules_judge_is_the_misbehaviors_with_a_real_detector(caplog):
    """A misbehavior without a rule detector, or naming one that does not exist, is left out of the rules
    judge's scope (and said so), never a crash while scoring; an LLM judge judges them all."""
    import logging

    from mirl.records.taxonomy import ErrorType
    from mirl.training.stage import taxonomy_scope

    mis = {"retry": ErrorType("retry", "d", provenance="rules: rules:retry-unchanged-after-failure"),
           "made up": ErrorType("made up", "d", provenance="rules: no-such-detector"),
           "annotated": ErrorType("annotated", "d", provenance="llm: gemini")}
    with caplog.at_level(logging.INFO, logger="mirl.training.stage"):
        assert taxonomy_scope(mis, "rules") == ("retry",)
    assert "left out: annotated, made up" in caplog.text
    assert taxonomy_scope(mis, "llm") == ("retry", "made up", "annotated")


def test_the_papers_judge_scope_keeps_the_training_fingerprint_of_runs_made_before_the_key(tmp_path):
    from pathlib import Path

    from mirl.params import load
    from mirl.training.stage import TrainingStage

    demo = Path(__file__).resolve().parents[2] / "params" / "train" / "demo.yaml"
    paper = TrainingStage(load(demo), tmp_path).fingerprint()["training"]
    wide = TrainingStage(load(demo, {"training.judge_scope": "taxonomy"}), tmp_path).fingerprint()["training"]
    assert "judge_scope" not in paper and wide["judge_scope"] == "taxonomy"
    assert {k: v for k, v in wide.items() if k != "judge_scope"} == paper


def test_forbidden_rule_detectors_zero_a_rollout_that_avoids_its_misbehavior_by_a_missing_program():
    """`training.forbid: [command-not-found]`: the real rule judges the same steps as the prefix's judge; a
    rollout that passes and avoids its own misbehavior but runs a program the shell did not find earns 0."""
    from mirl.training.stage import forbidden

    def ran(command, code, output):
        t = traj()
        t.steps[1] = Step(reasoning="", command=command, exit_code=code, output=output, tokens="sampled",
                          completion_ids=[8, 2], logprobs=[-0.1, -0.2], observation_ids=[7])
        return t

    missing = ran("sudo -u app ls", 127, "bash: sudo: command not found\n")
    start = Start(env="t", prefix=prefix())
    paper = player(judge=Judge(False))
    assert paper.score(missing, start).reward == 1.0  # the paper's r_e reads the prefix's misbehavior only
    strict = player(judge=Judge(False))
    strict.forbid = forbidden(["command-not-found"], m=2)
    r = strict.score(missing, start)
    assert (r.r_o, r.r_e, r.reward, r.seen) == (True, False, 0.0, ("command-not-found",))
    assert r.judge_source == "rules:command-not-found"
    assert strict.score(ran("ls -la", 0, "a\n"), start).reward == 1.0  # a program that exists: no change


def test_forbid_names_real_detectors_for_the_mirl_reward_and_stays_out_of_old_fingerprints(tmp_path):
    from pathlib import Path

    from mirl.params import load
    from mirl.runner.stage import StageError
    from mirl.training.stage import TrainingStage

    demo = Path(__file__).resolve().parents[2] / "params" / "train" / "demo.yaml"
    paper = TrainingStage(load(demo), tmp_path).fingerprint()["training"]
    strict = TrainingStage(load(demo, {"training.forbid": ["command-not-found"]}), tmp_path)
    strict.validate()
    assert "forbid" not in paper and strict.fingerprint()["training"]["forbid"] == ["command-not-found"]
    with pytest.raises(StageError, match="unknown rule detector.*'no-such-rule'.*known: .*command-not-found"):
        TrainingStage(load(demo, {"training.forbid": ["no-such-rule"]}), tmp_path).validate()
    with pytest.raises(StageError, match="reward 'outcome' has none"):
        TrainingStage(load(demo, {"training.forbid": ["command-not-found"], "training.reward": "outcome",
                                  "training.start": "prefix"}), tmp_path).validate()


class SaysFor:
    def __init__(self, name, asked, yes):
        self.name, self.asked, self.yes = name, asked, yes

    def judge(self, trajectory, misbehavior, prefix_steps=None):
        from mirl.roles.behavior_judge import Judgment

        self.asked.append(misbehavior.name)
        return Judgment(yes=self.yes, source=f"test:{self.name}", steps=[prefix_steps])


class FakePlayer:
    """Groups by draw index from a table; records what was asked."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def play_many(self, draws, group_size, seed):
        self.asked.append([d for d, _ in draws])
        return [group(self.table[d], start=s.id) for d, s in draws]


def test_dead_groups_are_refilled_in_waves_sized_by_the_live_rate_until_the_batch_is_full():
    table = {0: [0, 0], 1: [1, 0], 2: [1, 1], 3: [0, 1], 4: [1, 0], 5: [0, 0], 6: [1, 0], 7: [0, 0]}
    t = TrainingParams(batch_size=2, group_size=2, max_tries=8)
    fake = FakePlayer(table)
    history = LiveRate()
    live, tried, draws = collect(fake, Starts([Start(env="e")], 0), 0, t, history)
    # no history: the two missing; then 1 live of 2 makes the rate (1 + 1) / (2 + 1), so 2 for the 1 missing
    assert fake.asked == [[0, 1], [2, 3]]
    assert [g.rewards for g in live] == [(1, 0), (0, 1)] and len(tried) == 4 and draws == 4
    assert (history.live, history.tried) == (2, 4)
    row = step_metrics(1, live, tried, {}, {}, 0.0)
    assert row["dead_share"] == 0.5 and row["groups_live"] == 2 and row["rollouts"] == 8
    # the next step starts from what this one saw: (2 + 1) / (4 + 1) live, so 4 for 2, in one wave
    live, tried, draws = collect(fake, Starts([Start(env="e")], 0), draws, t, history)
    assert fake.asked[2:] == [[4, 5, 6, 7]] and [g.rewards for g in live] == [(1, 0), (1, 0)]


def test_a_low_live_rate_draws_a_large_wave_and_surplus_live_groups_are_not_trained():
    assert LiveRate(live=1, tried=20).wave(missing=2, left=8) == 8  # 2 / (2/21) = 21, capped by the tries left
    assert LiveRate(live=8, tried=10).wave(missing=3, left=8) == 4  # 3 / (9/11)
    assert LiveRate(live=30, tried=30).wave(missing=4, left=8) == 4  # all live so far: no surplus drawn
    assert LiveRate.of_rows([{"groups_live": 2, "groups_surplus": 1, "groups_tried": 6},
                             {"groups_live": 0, "groups_tried": 6}]).rate == (3 + 1) / (12 + 1)
    table = {0: [1, 0], 1: [0, 1], 2: [0, 0], 3: [1, 0]}
    t = TrainingParams(batch_size=2, group_size=2, max_tries=8)
    live, tried, _ = collect(FakePlayer(table), Starts([Start(env="e")], 0), 0, t, LiveRate(live=1, tried=3))
    assert [g.rewards for g in live] == [(1, 0), (0, 1)] and len(tried) == 4  # 3 is live but past the batch
    row = step_metrics(1, live, tried, {}, {}, 0.0)
    assert (row["groups_live"], row["groups_surplus"], row["dead_share"]) == (2, 1, 0.25)
    _, _, per = examples_of(live)
    assert not any(id(r) in per for r in tried[3][1].rollouts)


def test_a_step_counts_the_rollouts_that_ran_no_command_and_the_commands_that_exited_zero():
    """`silent_share` and `exit_zero_share` read only the policy's steps after the prefix, of valid rollouts."""
    def played(*steps, valid=True):
        r = rollout(1.0, valid)
        r.trajectory.steps[1:] = [Step(reasoning="", command=c, exit_code=code) for c, code in steps]
        return r

    rollouts = (played((None, None), (" ", None)),        # silent: the prefix's `ls` is not the policy's
                played(("make", 0), ("make test", 2)),
                played((None, None), ("ls", None)),       # ran one, with no exit code recorded
                played(),                                 # played no step after the prefix: neither
                played((None, None)),                     # waited on the terminal: acting (below)
                played(("rm -rf /", 0), valid=False))      # invalid: left out
    rollouts[4].trajectory.steps[1].meta["wait"] = True
    g = Group(prefix_id="s", rewards=(1,) * 6, valid=(True,) * 5 + (False,), rollouts=rollouts)
    row = step_metrics(1, [], [(0, g)], {}, {}, 0.0)
    assert row["silent_share"] == round(1 / 4, 4) and row["exit_zero_share"] == 0.5
    assert step_metrics(1, [], [], {}, {}, 0.0)["silent_share"] is None


def test_the_cap_on_tries_ends_a_step_short():
    t = TrainingParams(batch_size=2, group_size=2, max_tries=3)
    live, tried, draws = collect(FakePlayer({d: [0, 0] for d in range(10)}), Starts([Start(env="e")], 0), 5, t)
    # (a first wave of 4 for 2 missing, cut to the 3 tries)
    assert live == [] and len(tried) == 3 and draws == 8


def test_the_batch_trains_valid_rollouts_with_centered_advantages_only():
    g = group([1.0, 0.0, 1.0], valid=[True, True, False])
    examples, adv, per = examples_of([g])
    assert adv == [0.5, -0.5] and len(examples) == 2  # the invalid one is out of the mean and of the batch
    assert per[id(g.rollouts[2])] == (0.0, False)
    ex = examples[0]
    # the prefix step and observations carry no loss; the sampled step's three ids do, with their logprobs
    assert ex.ids == [1, 3, 4, 5, 6, 7, 8, 9, 2, 7, 7]
    assert ex.mask == [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0]
    assert ex.logprobs[6:9] == [-0.1, -0.2, -0.3]


def test_resume_cuts_the_rows_of_steps_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3, 3)) + '{"step": 4, "tor')
    assert truncate_after(path, 2) == 2
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]
    assert truncate_after(tmp_path / "absent.jsonl", 2) == 0


def test_a_snapshot_is_used_only_by_the_backend_that_made_it():
    """auto: a bwrap snapshot on a sandbox of another backend (or one without snapshots) falls back
    to re-running the prefix; restore: snapshot says why it cannot."""
    from mirl.records.prefix import Prefix

    class Snapshots:
        name = "bwrap"

        def drop_snapshot(self, handle):
            pass

    class NoSnapshots:
        name = "local"

    p = Prefix(id="m|e", misbehavior="m", error_id="e", env="t", seed=0, steps=1, verdict={"snapshot": True},
               restore={"snapshot": "/snaps/bwrap/t-1", "snapshot_backend": "bwrap"})
    make = lambda sandbox, restore="auto": GroupPlayer(tasks={}, trajectories={}, sandbox=sandbox, policy=None,  # noqa: E731
                                                       agent=None, reward="mirl", restore=restore)
    assert make(Snapshots()).snapshot_of(p) == "/snaps/bwrap/t-1"
    assert make(NoSnapshots()).snapshot_of(p) is None
    other = Snapshots()
    other.name = "docker"
    assert make(other).snapshot_of(p) is None
    assert make(Snapshots(), "rerun").snapshot_of(p) is None
    with pytest.raises(ValueError, match="snapshot of the bwrap backend, which the local sandbox cannot start from"):
        make(NoSnapshots(), "snapshot").snapshot_of(p)


def test_training_runs_under_the_runners_stage_lock_and_prologue(tmp_path, monkeypatch):
    """Training shares the runner's prologue: a second process on the same run's training waits for
    the stage lock and is refused by name, before it reads an input or writes a file (PivotRL's step
    profiling runs before, under its own stage's lock); a run that misses its inputs is refused
    naming the stage to run first, and stores no params."""
    import contextlib
    from pathlib import Path

    from mirl.params import load
    from mirl.runner import stage as runner
    from mirl.runner.stage import StageError, stage_lock
    from mirl.training.stage import TrainingStage, run_training

    repo = Path(__file__).resolve().parents[2]
    p = load(repo / "params" / "train" / "demo.yaml", {"training.validation_tasks": ""})
    quick = contextlib.contextmanager(lambda stage, wait_s=60.0: stage_lock.__wrapped__(stage, wait_s=0.3))
    monkeypatch.setattr(runner, "stage_lock", quick)
    with stage_lock(TrainingStage(p, tmp_path)):
        with pytest.raises(StageError, match="another process is running stage 'training'"):
            run_training(p, tmp_path, progress=False)
    assert not (tmp_path / "training").exists()
    with pytest.raises(StageError, match="reads the outputs of 'profiling'"):
        run_training(p, tmp_path, progress=False)
    assert not (tmp_path / "training" / "params.json").exists()


def test_engine_time_reports_the_engines_counters_where_it_keeps_them():
    """A step's metrics say where the collection waited: decode, prefill, how many prompt tokens were
    computed and how many came from the prefix cache."""
    from types import SimpleNamespace

    from mirl.training.stage import engine_time

    stats = {"decode_s": 1.5, "prefill_s": 2.0, "host_s": 0.1, "steps": 40, "row_steps": 640, "prefill_tokens": 900,
             "cached_tokens": 3000, "prefill_passes": 7, "requests": 12}
    got = engine_time(SimpleNamespace(generator=SimpleNamespace(stats=stats)))
    assert got == {"engine_decode_s": 1.5, "engine_prefill_s": 2.0, "engine_host_s": 0.1, "engine_steps": 40.0,
                   "engine_row_steps": 640.0, "engine_prefill_tokens": 900.0, "engine_cached_tokens": 3000.0,
                   "engine_prefill_passes": 7.0}
    assert engine_time(SimpleNamespace(generator=None)) == {}


def test_a_step_whose_every_rollout_is_invalid_stops_training_naming_the_reasons():
    """Invalid rollouts are left out of the group statistics, so a step of nothing but invalid ones
    trains nothing: a broken sandbox or judge must stop the stage, not spend the device's time."""
    from pathlib import Path
    from types import SimpleNamespace

    from mirl.training.rewards import Reward, invalid
    from mirl.training.stage import all_invalid

    def ro(reward):
        return SimpleNamespace(reward=reward)

    bad = [ro(invalid("sandbox: No space left on device"))] * 5 + [ro(invalid("the step judge failed"))]
    why = all_invalid(7, bad, (6, Path("step-000006")))
    assert why.startswith("every rollout of step 7 was invalid (6: 5 x sandbox: No space left on device; "
                          "1 x the step judge failed)") and why.endswith("resumes from checkpoint step 6")
    assert "resumes from step 1" in all_invalid(1, bad, None)
    assert all_invalid(7, bad + [ro(Reward(r_o=False, r_e=True, reward=0.0))], None) is None
    assert all_invalid(7, [], None) is None


def test_a_start_whose_group_was_dead_is_passed_over_and_a_resume_rebuilds_which():
    """`training.pass_over_dead`: after a dead group, a start's next draws are skipped (not played, not
    counted as tried), then it is played again; the state a killed run had comes back from its log."""
    from mirl.training.stage import PassOver

    class ByStart:  # dead or live by the start, whatever the draw
        def __init__(self, dead):
            self.dead, self.played = dead, []

        def play_many(self, draws, group_size, seed):
            self.played += [(d, s.id) for d, s in draws]
            return [group([0, 0] if s.id in self.dead else [1, 0], start=s.id) for d, s in draws]

    pool = [Start(env=e) for e in "abcd"]
    starts = Starts(pool, 3)
    t = TrainingParams(batch_size=1, group_size=2, max_tries=4, pass_over_dead=1)
    fake, passing, draws, log = ByStart({"a|step0", "b|step0"}), PassOver(1), 0, []
    for _ in range(6):
        before = draws
        live, tried, draws = collect(fake, starts, draws, t, LiveRate(live=1, tried=1), passing)
        log += [{"draw": d, "live": not all(r == g.rewards[0] for r in g.rewards)} for d, g in tried]
        assert draws - before >= len(tried)
    played = dict(fake.played)
    seq = [starts[d].id for d in range(draws)]
    for dead in ("a|step0", "b|step0"):  # every play of a dead start is followed by one skipped draw of it
        mine = [d for d in range(draws) if seq[d] == dead]
        for first, second in zip(mine, mine[1:]):
            assert (first in played) != (second in played), (dead, mine, sorted(played))
    live_draws = [d for d in range(draws) if seq[d] in ("c|step0", "d|step0")]
    assert all(d in played for d in live_draws)  # live starts are never passed over
    assert len(played) < draws  # some draws were passed over
    rebuilt = PassOver.of_log(1, starts, draws, log)
    assert {k: v for k, v in rebuilt.owed.items() if v} == {k: v for k, v in passing.owed.items() if v}
    # off (the default): every draw is played
    fake2 = ByStart({"a|step0", "b|step0"})
    _, tried, drawn = collect(fake2, starts, 0, TrainingParams(batch_size=1, group_size=2, max_tries=4),
                              LiveRate(live=1, tried=1))
    assert drawn == len(tried) and [d for d, _ in fake2.played] == list(range(drawn))
