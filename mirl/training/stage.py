"""The training stage: RL from misbehavior prefixes (or the baselines' starts), resumable by checkpoint.

Each step draws groups (`mirl.training.rollouts`), plays and rewards their G rollouts, drops dead
groups (all rewards equal) and draws fresh ones until `batch_size` live groups are in or
`max_tries` groups were tried, turns the live rollouts into token-level examples (the stored ids;
loss only on the policy's post-prefix samples), takes one learner step and hands the new weights
to the generator. Written under `runs/<run>/training/`:

    metrics.jsonl     one row per step: reward, r_o and r_e rates, dead-group share, masked-token
                      share, learner/sampler log-prob mismatch, loss, entropy, tokens, the time
                      split (rollout, reward, learner, weight sync) and the judge spend
    rollouts.jsonl    every rollout tried, with its step, group, reward, advantage and trajectory
    checkpoints/      step-NNNNNN every `checkpoint_every` steps and at the end (Hugging Face format)
    selection.json    the paper's checkpoint selection: top N by smoothed training reward
    params.json, summary.json   as every stage

A killed run restarts from its last checkpoint: rows of later steps are removed from both logs, the
weights and optimizer state are loaded, and the step count and the sequence of drawn groups go on
from there. Different params are refused (`mirl.runner.fingerprint`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirl.agent.continuation import with_limits
from mirl.jsonl import JsonlWriter, read_jsonl
from mirl.llm.errors import BudgetExceeded
from mirl.runner.devices import record_device_time
from mirl.runner.inputs import HELDOUT, TRAIN, EpisodeInputs, load_prefixes, task_pool, taxonomy_store
from mirl.runner.layout import atomic_write_json, atomic_write_jsonl
from mirl.runner.progress import PROGRESS, Progress
from mirl.runner.stage import Stage, StageError, run_own_loop
from mirl.training import checkpoints as ckpt
from mirl.training.advantages import Group, batch_advantages, is_dead
from mirl.training.engine import EmbeddedEngine
from mirl.training.learner import Example, LearnerConfig
from mirl.training.params import pivot_judge_calls_llm
from mirl.training.rollouts import GroupPlayer, Start, Starts, env_starts, prefix_starts
from mirl.training.sequences import NoTokenIds, training_example

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "training"
METRICS, ROLLOUTS, SELECTION, CHECKPOINTS = "metrics.jsonl", "rollouts.jsonl", "selection.json", "checkpoints"
RUBRICS = "rubrics.jsonl"


class TrainingStage(EpisodeInputs, Stage):
    name = STAGE
    records = METRICS
    derived = (ROLLOUTS, SELECTION, CHECKPOINTS, RUBRICS)

    def __init__(self, params: Params, run_dir, sandbox=None, tasks=None):
        super().__init__(params, run_dir)
        self._sandbox, self._tasks = sandbox, tasks
        self.given_tasks = tasks  # as the caller gave them (None: the stored pool), for the Ray workers
        self.validate()

    @property
    def reads(self) -> tuple[str, ...]:  # type: ignore[override]
        t = self.params.training
        if t.start == "pivot":
            return ("profiling", "step_profiling")
        return ("profiling",) if t.start == "random" else ("profiling", "taxonomy", "prefixes")

    def validate(self) -> None:
        t = self.params.training
        problems = []
        if t.reward == "mirl" and t.start in ("env", "random"):
            problems.append(f"reward mirl needs start prefix (a misbehavior to avoid), got start {t.start!r}")
        if t.judge_scope != "prefix" and t.reward != "mirl":
            problems.append(f"judge_scope {t.judge_scope!r} scopes the behavior judge of reward mirl; reward {t.reward!r} "
                            "has none (leave judge_scope at prefix)")
        if t.forbid and t.reward != "mirl":
            problems.append(f"forbid {t.forbid} adds rule detectors to r_e of reward mirl; reward {t.reward!r} has none")
        unknown = [d for d in t.forbid if d not in known_detectors()]
        if unknown:
            problems.append(f"forbid: unknown rule detector(s) {', '.join(map(repr, unknown))}; known: "
                            f"{', '.join(sorted(known_detectors()))}")
        if t.kl_coef != 0:
            problems.append("kl_coef: only 0 is supported (the paper trains without a KL term)")
        if t.max_tries < t.batch_size:
            problems.append(f"max_tries ({t.max_tries}) must be at least batch_size ({t.batch_size})")
        if t.engine == "scale":
            s = t.scale
            if s.zero_stage not in (2, 3):
                problems.append(f"scale.zero_stage must be 2 or 3, got {s.zero_stage}")
            if s.learners != 1:
                problems.append(f"scale.learners is {s.learners}: mirl train drives one learner process so far "
                                "(data-parallel ZeroLearner runs under torchrun: benchmarks/gpu/zero_check.py)")
        if problems:
            raise StageError("training params: " + "; ".join(problems))

    # --- what the run depends on ---------------------------------------------------------------

    def llm_config(self):
        from mirl.training.params import training_llm_config

        return training_llm_config(self.params)

    def fingerprint(self) -> dict[str, Any]:
        from mirl.agent.rollout import role_fingerprint, sandbox_fingerprint

        t = asdict(self.params.training)
        # what only extends a run (more steps), its speed or its bookkeeping stays out
        for k in ("steps", "workers", "budget_usd", "gpu_budget_hours", "keep_checkpoints", "select_top", "smoothing",
                  "device", "compile_learner", "validation_tasks", "validation_ids", "validation_seeds", "engine", "scale"):
            t.pop(k)
        if t["judge_scope"] == "prefix":  # the only behaviour before the key existed: runs made then resume
            t.pop("judge_scope")
        if not t["forbid"]:  # likewise
            t.pop("forbid")
        llm = self.llm_config()
        roles = {"policy": role_fingerprint(llm, "policy")}
        used = {"behavior_judge": t["start"] != "pivot" and t["reward"] == "mirl" and t["judge"] == "llm",
                "rubric_writer": t["start"] != "pivot" and t["reward"] == "rubric" and t["rubric_writer"] == "llm",
                "rubric_judge": t["start"] != "pivot" and t["reward"] == "rubric" and t["rubric_judge"] == "llm",
                "step_judge": t["start"] == "pivot" and pivot_judge_calls_llm(t["pivot_judge"])}
        roles.update({role: role_fingerprint(llm, role) for role, on in used.items() if on})
        return {"training": t, "models": roles, "agent": asdict(self.params.agent),
                "sandbox": sandbox_fingerprint(self.params.sandbox)}

    @property
    def checkpoints(self) -> Path:
        return self.out / CHECKPOINTS

    def has_outputs(self) -> bool:
        return (self.out / METRICS).exists() or ckpt.latest(self.checkpoints) is not None

    # --- inputs ----------------------------------------------------------------------------------

    def tasks(self) -> dict[str, Any]:
        if self._tasks is None:
            self._tasks = task_pool(self.run, self.params.training.tasks or self.params.profiling.tasks,
                                    prefer_stored=not self.params.training.tasks)
        return {t.id: t for t in self._tasks}

    def misbehaviors(self):
        store = taxonomy_store(self.run)
        version = self.params.prefixes.taxonomy_version or store.latest()
        return {t.name: t for t in store.load(version).types}

    def starts(self, misbehaviors) -> tuple[list[Start], dict[str, int]]:
        """The pool of starts and what was left out of it (and why), in the environments drawn
        (`training.environments`; the draw is written to training/environments.json)."""
        from mirl.roles.behavior_judge import has_rule_detector
        from mirl.training import environments

        t = self.params.training
        if t.start in ("random", "pivot"):
            pool, source = environments.pool(list(self.tasks()), [k[0] for k in self.trajectories()], bool(t.tasks))
            drawn = environments.record(self.out, pool, t.environments, t.environments_seed, source)
        if t.start == "random":
            return env_starts(drawn["environments"]), {}
        if t.start == "pivot":
            from mirl.training.pivot import Pivot
            from mirl.training.step_profiling import load_pivots

            keep = set(drawn["environments"])
            pivots = [Start(env=r["task"], pivot=Pivot(r["task"], int(r["seed"]), int(r["step"])))
                      for r in load_pivots(self.run.root) if r["task"] in keep]
            if not pivots:
                raise StageError("step profiling kept no pivot (no candidate's actions got different rewards): "
                                 "PivotRL has nothing to train on")
            return pivots, {}
        prefixes = load_prefixes(self.run.root, TRAIN)
        tasks = self.tasks()
        skipped: dict[str, int] = {}

        def keep(p) -> bool:
            why = None
            if p.env not in tasks:
                why = "environment not in the task pool"
            elif t.start == "prefix" and p.steps >= t.max_steps:  # the rollout would be the prefix alone: all dead
                why = "its prefix fills training.max_steps (no step left to the policy)"
            elif t.reward == "mirl" and p.misbehavior not in misbehaviors:
                why = "misbehavior not in the taxonomy"
            elif t.reward == "mirl" and t.judge == "rules" and not has_rule_detector(misbehaviors[p.misbehavior]):
                why = "no rule detector for its misbehavior (judge: rules)"
            if why:
                skipped[why] = skipped.get(why, 0) + 1
            return why is None

        pool = prefix_starts(prefixes, keep)
        drawn = set(environments.record(self.out, [s.env for s in pool], t.environments, t.environments_seed,
                                        "the kept prefixes' environments")["environments"])
        if len(drawn) < len({s.env for s in pool}):
            skipped["environment not drawn (training.environments)"] = sum(s.env not in drawn for s in pool)
            pool = [s for s in pool if s.env in drawn]
        if t.start == "env":
            return env_starts([s.env for s in pool]), skipped
        return pool, skipped

    def training_starts(self) -> tuple[dict[str, Any], list[Start], dict[str, int]]:
        """(misbehaviors, the pool of starts, what was left out and why), read from the earlier stages;
        an error when no start is left."""
        misbehaviors = self.misbehaviors() if self.params.training.start == "prefix" else {}
        pool, skipped = self.starts(misbehaviors)
        if skipped:
            log.warning("training: %s", "; ".join(f"{n} start(s) left out: {why}" for why, n in skipped.items()))
        if not pool:
            raise StageError("training: no start left to train from" + (" (" + "; ".join(
                f"{n} left out: {why}" for why, n in skipped.items()) + ")" if skipped else
                f" ({self.why_no_prefix()})" if self.params.training.start == "prefix" else
                " (no kept prefixes or environments)"))
        return misbehaviors, pool, skipped

    def why_no_prefix(self) -> str:
        """Why stage 03 left no training prefix: with few prefixes, the held-out split can take them all."""
        try:
            held = len(load_prefixes(self.run.root, HELDOUT))
        except FileNotFoundError:  # a run from before the split
            held = 0
        if not held:
            return "stage 03 kept no prefix"
        return (f"stage 03 held out all {held} kept prefixes for evaluation (prefixes.heldout_per_misbehavior "
                f"{self.params.prefixes.heldout_per_misbehavior}, set aside first): hold out fewer, or sample more "
                "(prefixes.per_misbehavior, profiling.max_tasks, profiling.seeds)")

    def player(self, client, misbehaviors, envs: list[str] | None = None):
        from mirl.roles.behavior_judge import example_texts, judge_for

        t = self.params.training
        if t.start == "pivot":
            from mirl.training.rollouts import PivotPlayer
            from mirl.training.step_profiling import step_judge

            return PivotPlayer(self.trajectories(), client.generator("policy"), step_judge(client, t.pivot_judge),
                               workers=t.workers)
        rubric_reward = self.rubric_reward(client, envs or []) if t.reward == "rubric" else None
        judges, scope, forbid = None, (), ()
        if t.reward == "mirl":
            examples = None
            if t.judge == "llm":
                from mirl.records.loaders import load_error_steps

                examples = example_texts(load_error_steps(self.run))
            cache: dict[str, Any] = {}

            def judges(name: str):
                if name not in cache:
                    cache[name] = judge_for(misbehaviors[name], client=client if t.judge == "llm" else None,
                                            m=t.judge_steps, examples=examples, prefer=t.judge)
                return cache[name]

            if t.judge_scope == "taxonomy":
                scope = taxonomy_scope(misbehaviors, t.judge)
            forbid = forbidden(t.forbid, t.judge_steps)
        return GroupPlayer(tasks=self.tasks(), trajectories=self.trajectories() if t.start == "prefix" else {},
                           sandbox=self.sandbox(), policy=client.model("policy"),
                           agent=with_limits(self.params.agent, t.max_steps), reward=t.reward, judges=judges,
                           misbehaviors=misbehaviors, rubric_reward=rubric_reward, restore=t.restore,
                           scope=scope, forbid=forbid, workers=t.workers)

    def rubric_reward(self, client, envs: list[str]):
        """RaR+: each environment's rubric (written once, kept in rubrics.jsonl) and the reward of a rollout."""
        from mirl.roles.rubric_judge import LLMRubricJudge, RuleRubricJudge
        from mirl.roles.rubric_writer import LLMRubricWriter, ReferenceRubricWriter, load_rubrics, save_rubrics
        from mirl.training.rubric_reward import rar_reward

        t = self.params.training
        path = self.out / RUBRICS
        rubrics = load_rubrics(path) if path.exists() else {}
        writer = LLMRubricWriter(client) if t.rubric_writer == "llm" else ReferenceRubricWriter()
        tasks = self.tasks()
        missing = [e for e in sorted(set(envs)) if e not in rubrics]
        for env in missing:
            rubrics[env] = writer.write(tasks[env])
        if missing:
            save_rubrics(path, rubrics.values())
        judge = LLMRubricJudge(client) if t.rubric_judge == "llm" else RuleRubricJudge()
        return lambda traj, env: rar_reward(traj, None, rubrics[env], judge, traj.prefix_len)



def policy_engine(client) -> Any:
    """The in-process engine behind the policy role, which the learner's weights are handed to."""
    generator = client.generator("policy")
    if generator is None:
        raise StageError(f"training needs a token-level policy in this process (models.policy.model local/...), "
                         f"got {client.config.policy.model!r}: a remote API returns text, not token ids")
    return generator.engine


def make_engine(generator: Any, t) -> Any:
    """The `TrainEngine` of `training.engine`: embedded (this process) or scale (Ray + DeepSpeed)."""
    config = LearnerConfig(lr=t.lr, weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm, loss=t.loss,
                           delta=t.delta, eps_low=t.eps_low, eps_high=t.eps_high, temperature=t.temperature,
                           micro_batch_tokens=t.micro_batch_tokens, gradient_checkpointing=t.gradient_checkpointing,
                           compile_layers=t.compile_learner)
    if t.engine == "scale":
        from mirl.training.scale.engine import ScaleEngine

        return ScaleEngine(generator, config, zero_stage=t.scale.zero_stage)
    return EmbeddedEngine(generator, config, device=t.device)


ENGINE_COUNTERS = ("decode_s", "prefill_s", "host_s", "steps", "row_steps", "prefill_tokens", "cached_tokens",
                   "prefill_passes")


def engine_time(engine: Any) -> dict[str, float]:
    """The policy engine's own counters so far, where it keeps them (`engine_decode_s`, `engine_prefill_s`:
    wall time of the thread that runs the model; its decode steps, rows decoded, prompt tokens computed
    and taken from the prefix cache): what says whether a slow step waited on decoding, on prefill, or
    on the sandboxes."""
    stats = getattr(getattr(engine, "generator", None), "stats", None) or {}
    return {f"engine_{k}": float(stats[k]) for k in ENGINE_COUNTERS if k in stats}


# --- resume -------------------------------------------------------------------------------------


def truncate_after(path: Path, step: int) -> int:
    """Drop the rows of steps after `step` (a kill's leftovers); returns how many went."""
    if not path.exists():
        return 0
    rows, _ = read_jsonl(path)
    keep = [r for r in rows if int(r.get("step", 0)) <= step]
    if len(keep) != len(rows) or path.stat().st_size and not rows:
        atomic_write_jsonl(path, keep)
    return len(rows) - len(keep)


def resume_point(stage: TrainingStage, engine: EmbeddedEngine) -> tuple[int, int]:
    """(steps done, groups drawn) from the last checkpoint, its weights loaded; (0, 0) without one."""
    if stage.checkpoints.exists():
        ckpt.sweep(stage.checkpoints)  # what a killed save left: a copy it had moved aside counts again
    found = ckpt.latest(stage.checkpoints)
    step, draws = 0, 0
    if found is not None:
        step, path = found
        state = ckpt.read_state(path)
        engine.load(path)
        draws = int(state["draws"])
        log.info("training: resuming after step %d from %s", step, path)
    for name in (METRICS, ROLLOUTS):
        gone = truncate_after(stage.out / name, step)
        if gone:
            log.info("training: removed %d row(s) of %s past the checkpoint", gone, name)
    return step, draws


# --- one step -----------------------------------------------------------------------------------


class LiveRate:
    """The share of drawn groups that were live so far in this run, as (live + 1) / (tried + 1): one live
    group assumed, so a fresh run's first wave is the batch itself and a run whose groups are all live
    never draws more than it needs. What a wave's size is planned from."""

    def __init__(self, live: int = 0, tried: int = 0):
        self.live, self.tried = live, tried

    @classmethod
    def of_rows(cls, rows: list[dict[str, Any]]) -> LiveRate:
        """From the metrics rows of the steps done (a resumed run plans as the killed one did)."""
        return cls(sum(int(r.get("groups_live") or 0) + int(r.get("groups_surplus") or 0) for r in rows),
                   sum(int(r.get("groups_tried") or 0) for r in rows))

    @property
    def rate(self) -> float:
        return (self.live + 1) / (self.tried + 1)

    def wave(self, missing: int, left: int) -> int:
        """Groups to draw for `missing` live ones: as many as the rate says it takes, at most `left`."""
        return max(0, min(left, math.ceil(missing / self.rate)))


class PassOver:
    """Which draws of the endless start sequence are played: a start whose last group was dead is passed
    over its next `times` draws (`training.pass_over_dead`). A dead group trains nothing, and in an H200
    run of SmolLM2 (2026-12-05, 259 groups of 100 prefixes) a start's next group was live 6% of the time
    after a dead one and 41% after a live one. State is rebuilt from the rollouts log on resume."""

    def __init__(self, times: int = 0):
        self.times, self.owed = times, {}

    def take(self, start: str) -> bool:
        """Play this draw of `start` (True), or pass it over (False, one fewer owed)."""
        owed = self.owed.get(start, 0)
        if owed:
            self.owed[start] = owed - 1
        return not owed

    def played(self, start: str, dead: bool) -> None:
        self.owed[start] = self.times if dead else 0

    @classmethod
    def of_log(cls, times: int, starts: Starts, draws: int, rows: list[dict[str, Any]]) -> PassOver:
        """From the rollouts log (draw, start, live) of a run that has drawn `draws`: a draw below it that
        no row names was passed over."""
        out = cls(times)
        if not times:
            return out
        played = {int(r["draw"]): bool(r.get("live")) for r in rows if "draw" in r}
        for d in range(draws):
            start = starts[d].id
            if d in played:
                out.played(start, dead=not played[d])
            elif out.owed.get(start):
                out.owed[start] -= 1
        return out


def collect(player: GroupPlayer, starts: Starts, draws: int, t, history: LiveRate | None = None,
            passing: PassOver | None = None) -> tuple[list[Group], list[tuple[int, Group]], int]:
    """Live groups for one step, drawn in waves: each wave draws as many groups as the run's live
    rate says it takes to fill the batch (`LiveRate`; never more than `max_tries` in a step), plays
    them at once, and keeps the live ones, the first `batch_size` in draw order (DAPO's dynamic
    sampling: a live group past the batch is surplus, played but not trained). Few large waves
    instead of many small ones: a wave waits for its slowest rollout. Returns (live, all tried with
    their draw index, draws so far, the passed-over included)."""
    history = history if history is not None else LiveRate()
    passing = passing if passing is not None else PassOver()
    live: list[Group] = []
    tried: list[tuple[int, Group]] = []
    while len(live) < t.batch_size and len(tried) < t.max_tries:
        k = history.wave(t.batch_size - len(live), t.max_tries - len(tried))
        wave = []
        while len(wave) < k:
            if passing.take(starts[draws].id):
                wave.append((draws, starts[draws]))
            draws += 1
        groups = player.play_many(wave, t.group_size, t.seed)
        for (d, s), g in zip(wave, groups):
            tried.append((d, g))
            dead = is_dead(g)
            passing.played(s.id, dead)
            history.tried += 1
            history.live += not dead
            if not dead and len(live) < t.batch_size:
                live.append(g)
    return live, tried, draws


def examples_of(groups: list[Group]) -> tuple[list[Example], list[float], dict[int, tuple[float, bool]]]:
    """The learner's batch from live groups: one example per valid rollout, with its advantage."""
    advantages, train = batch_advantages(groups)
    out, adv, per = [], [], {}
    rollouts = [r for g in groups for r in g.rollouts]
    for r, a, ok in zip(rollouts, advantages, train):
        per[id(r)] = (a, ok)
        if not ok:
            continue
        try:
            ids, mask, lps = training_example(r.trajectory)
        except NoTokenIds as e:
            raise StageError(f"rollout {r.start} sample {r.sample}: {e}") from e
        out.append(Example(ids, mask, lps))
        adv.append(a)
    return out, adv, per


def step_metrics(step: int, live: list[Group], tried: list[tuple[int, Group]], learn: dict[str, Any],
                 seconds: dict[str, float], judge_usd: float) -> dict[str, Any]:
    all_rollouts = [r for _, g in tried for r in g.rollouts]
    valid = [r for r in all_rollouts if r.reward.valid]
    live_valid = [r for g in live for r in g.rollouts if r.reward.valid]

    def rate(rs, f):
        return round(sum(f(r) for r in rs) / len(rs), 4) if rs else None

    traj_steps = [len(r.trajectory.steps) - r.trajectory.prefix_len for r in all_rollouts]
    # what the policy did after the prefix: a reward can be earned by falling silent or running anything
    # else (stage 05's silence.csv and actions.csv read the same at evaluation; waiting on a terminal acts)
    played = [[x for x in r.trajectory.steps[r.trajectory.prefix_len:] if x.source == "policy"] for r in valid]
    ran = [x for steps in played for x in steps if (x.command or "").strip()]
    coded = [x.exit_code == 0 for x in ran if x.exit_code is not None]
    silent = [not any((x.command or "").strip() or x.meta.get("wait") for x in steps) for steps in played if steps]
    # where the episodes' time went, summed over episodes (they run concurrently: these add up to
    # more than the step's wall time)
    spent = {f"episodes_{k}": round(sum(float((r.trajectory.timings or {}).get(k, 0.0)) for r in all_rollouts), 4)
             for k in ("model_s", "sandbox_s", "restore_s", "verify_s")}
    policy_out = sum(r.trajectory.meta.get("usage", {}).get("output_tokens", 0) for r in all_rollouts)
    policy_in = sum(r.trajectory.meta.get("usage", {}).get("input_tokens", 0) for r in all_rollouts)
    found = sum(not is_dead(g) for _, g in tried)  # live groups, the surplus past the batch included
    row = {"step": step, "reward": rate(valid, lambda r: r.reward.reward),
           "reward_live": rate(live_valid, lambda r: r.reward.reward),
           "r_o": rate(valid, lambda r: r.reward.r_o), "r_e": rate(valid, lambda r: r.reward.r_e),
           "groups_live": len(live), "groups_surplus": found - len(live), "groups_tried": len(tried),
           "dead_share": round(1 - found / len(tried), 4) if tried else None,
           "rollouts": len(all_rollouts), "invalid": len(all_rollouts) - len(valid),
           "policy_steps_mean": round(sum(traj_steps) / len(traj_steps), 3) if traj_steps else None,
           "silent_share": round(sum(silent) / len(silent), 4) if silent else None,
           "exit_zero_share": round(sum(coded) / len(coded), 4) if coded else None,
           "policy_input_tokens": policy_in, "policy_output_tokens": policy_out,
           "judge_usd": round(judge_usd, 6), **{k: round(v, 4) for k, v in seconds.items()}, **spent}
    for k, v in learn.items():
        row[k] = round(v, 6) if isinstance(v, float) else v
    return row


def known_detectors() -> set[str]:
    from mirl.detectors import DETECTORS

    return set(DETECTORS)


def forbidden(detectors: list[str], m: int) -> tuple[tuple[Any, Any], ...]:
    """(judge, misbehavior) pairs for `training.forbid`: each rule detector as a misbehavior of its own,
    judged by its rule over the same `m` steps as the prefix's."""
    from mirl.detectors import get_detectors
    from mirl.records.taxonomy import ErrorType
    from mirl.roles.behavior_judge import RuleBehaviorJudge

    judge = RuleBehaviorJudge(m=m)
    return tuple((judge, ErrorType(d.name, d.definition, provenance=f"rules: {d.name}", status="kept"))
                 for d in get_detectors(detectors))


def taxonomy_scope(misbehaviors: dict[str, Any], judge: str) -> tuple[str, ...]:
    """The misbehaviors `r_e` judges under `training.judge_scope: taxonomy`: all of them for an LLM judge,
    those with a rule detector for the rules judge (the rest are logged as left out, once)."""
    from mirl.roles.behavior_judge import has_rule_detector

    scope = tuple(n for n, m in misbehaviors.items() if judge == "llm" or has_rule_detector(m))
    left = sorted(set(misbehaviors) - set(scope))
    log.info("training: r_e judges %d misbehavior(s) of the taxonomy%s", len(scope),
             f"; without a rule detector, left out: {', '.join(left)}" if left else "")
    return scope


# --- the loop -----------------------------------------------------------------------------------


def run_training(params: Params, run_dir: str | Path, sandbox=None, tasks=None, force: bool = False,
                 progress: bool = True, on_step=None) -> dict[str, Any]:
    """Train until `training.steps` steps are done (or the budget stops it); returns the summary.

    The common runner's prologue and epilogue (`mirl.runner.stage.run_own_loop`: lock, force,
    fingerprint, input digests, summary and ledger) wrap the training loop (`train`).
    `on_step(row)` is called with each step's metrics row (the notebook plots from it)."""
    began = time.perf_counter()
    stage = TrainingStage(params, run_dir, sandbox=sandbox, tasks=tasks)
    t = params.training
    if t.validation_tasks:  # a missing validation set fails now, not after the last step
        from mirl.agent.rollout import RolloutError
        from mirl.training.selection import validation_pool

        try:
            validation_pool(t.validation_tasks, t.validation_ids)
        except RolloutError as e:
            raise StageError(f"training.validation_tasks: {e}") from None
    if t.start == "pivot":  # PivotRL's preprocessing: which reference steps are pivots (resumable, its own stage)
        from mirl.training.step_profiling import run_step_profiling

        profiled = run_step_profiling(params, run_dir, tasks=tasks, force=force, progress=progress)
        if not profiled["complete"]:
            raise StageError(f"step profiling stopped before every candidate was sampled ({profiled.get('stopped')}); "
                             "run again to finish it before PivotRL trains")
    return run_own_loop(stage, lambda digest, starts: train(stage, digest, *starts, progress=progress, on_step=on_step,
                                                            began=began),
                        force=force, prepare=stage.training_starts)


def train(stage: TrainingStage, digest: str, misbehaviors: dict[str, Any], pool: list[Start], skipped: dict[str, int],
          progress: bool = True, on_step=None, began: float | None = None) -> dict[str, Any]:
    """The training loop from the last checkpoint on; returns the summary fields (`finalize`), with
    `startup_s`: the seconds from the stage's start to its first step, split into reading the inputs,
    making the policy engine and learner, and making the rollout player (a device run pays them once
    per process, before any step)."""
    from mirl.llm.client import LLMClient
    from mirl.llm.ledger import open_ledger

    run, t = stage.run, stage.params.training
    t0 = time.perf_counter()
    startup = {"inputs": round(t0 - began, 3)} if began is not None else {}
    starts = Starts(pool, t.seed)
    client = LLMClient(stage.llm_config(), run_dir=run.root, stage=STAGE)
    engine = make_engine(policy_engine(client), t)
    done, draws = resume_point(stage, engine)
    t1 = time.perf_counter()
    startup["engine"] = round(t1 - t0, 3)
    history = LiveRate.of_rows(read_jsonl(stage.out / METRICS)[0] if (stage.out / METRICS).exists() else [])
    passing = PassOver.of_log(t.pass_over_dead, starts, draws,
                              read_jsonl(stage.out / ROLLOUTS)[0] if t.pass_over_dead and (stage.out / ROLLOUTS).exists()
                              else [])
    if t.engine == "scale":
        import functools

        from mirl.training.scale.engine import rollout_pool

        make = functools.partial(worker_player, stage.params, str(run.root), misbehaviors, [s.env for s in pool],
                                 stage.given_tasks)
        player = engine.pool = rollout_pool(make, t.scale)
    else:
        player = stage.player(client, misbehaviors, envs=[s.env for s in pool])
    startup["player"] = round(time.perf_counter() - t1, 3)
    ledger = open_ledger(run.root)
    stopped = None
    bar = Progress(total=t.steps, initial=done, disable=not progress, desc=STAGE, unit="step",
                   path=stage.out / PROGRESS if progress else None)
    try:
        with JsonlWriter(stage.out / METRICS) as metrics, JsonlWriter(stage.out / ROLLOUTS) as rollouts:
            for step in range(done + 1, t.steps + 1):
                if t.budget_usd > 0 and ledger.spent(STAGE) >= t.budget_usd:
                    stopped = f"budget: stage training spent ${ledger.spent(STAGE):.4f} of ${t.budget_usd:.4f}"
                    break
                gpu = gpu_hours(run.root, STAGE)
                if t.gpu_budget_hours > 0 and gpu >= t.gpu_budget_hours:
                    stopped = f"GPU budget: stage training used {gpu:.2f} of {t.gpu_budget_hours:g} GPU hours"
                    last = ckpt.latest(stage.checkpoints)
                    if step > 1 and (last is None or last[0] < step - 1):  # the budget ends the run: keep its last step
                        save_checkpoint(stage, engine, step - 1, draws, digest)
                    break
                spent0 = ledger.spent(STAGE)
                ts = time.perf_counter()
                busy0 = engine_time(engine)
                try:
                    drawn = draws
                    live, tried, draws = collect(player, starts, draws, t, history, passing)
                except BudgetExceeded as e:
                    stopped = f"BudgetExceeded: {e}"
                    break
                seconds = {"collect_s": time.perf_counter() - ts}
                seconds.update({k: v - busy0[k] for k, v in engine_time(engine).items()})
                rs = [r for _, g in tried for r in g.rollouts]
                seconds["rollout_s"] = sum(r.seconds["rollout_s"] for r in rs)
                seconds["reward_s"] = sum(r.seconds["reward_s"] for r in rs)
                examples, advantages, per = examples_of(live)
                learn = engine.train_step(examples, advantages) if examples else {"skipped": 1}
                seconds["sync_s"] = engine.update_weights() if examples else 0.0
                seconds["step_s"] = time.perf_counter() - ts
                batch = {id(g) for g in live}
                for d, g in tried:  # live: the rewards differ (a surplus group's too); trained: in the batch
                    dead = is_dead(g)
                    for r in g.rollouts:  # a surplus group's advantages were never computed: None
                        a, ok = per.get(id(r), (0.0 if dead or id(g) in batch else None, False))
                        rollouts.append({"step": step, "draw": d, "live": not dead, "advantage": a,
                                         "trained": ok, **r.to_dict()})
                row = step_metrics(step, live, tried, learn, seconds, ledger.spent(STAGE) - spent0)
                row.update(draws=draws, passed_over=draws - drawn - len(tried), time=round(time.time(), 3))
                metrics.append(row)
                record_device_time(run.root, STAGE, seconds["step_s"], device=engine.learner.device, step=step,
                                   part="step")
                if step % t.checkpoint_every == 0 or step == t.steps:
                    save_checkpoint(stage, engine, step, draws, digest)
                bar.update(1)
                bar.set_postfix({"reward": row["reward"], "dead": row["dead_share"], "loss": row.get("loss")},
                                refresh=False)
                if on_step is not None:
                    on_step(row)
                stopped = all_invalid(step, rs, ckpt.latest(stage.checkpoints))
                if stopped:
                    log.error("training: %s", stopped)
                    break
    finally:
        bar.close()
        if hasattr(player, "shutdown"):
            player.shutdown()
    return {**finalize(stage, stopped, skipped, pool), "startup_s": startup}


def all_invalid(step: int, rollouts: list, last: tuple[int, Path] | None) -> str | None:
    """Why training stops, when every rollout of a step was invalid (a sandbox, engine or judge failing,
    not the policy: the group statistics exclude invalid rollouts, so such steps train nothing and only
    spend device time; an H200 run of 2026-12-05 played four of them in a row); None otherwise."""
    if not rollouts or any(r.reward.valid for r in rollouts):
        return None
    why = Counter(r.reward.why_invalid or "no reason recorded" for r in rollouts).most_common(3)
    resume = f"checkpoint step {last[0]}" if last else "step 1"
    return (f"every rollout of step {step} was invalid ({len(rollouts)}: "
            + "; ".join(f"{n} x {w[:200]}" for w, n in why)
            + f"); fix what fails and run the stage again: it resumes from {resume}")


def gpu_hours(run_dir: str | Path, stage: str) -> float:
    """GPU hours a stage recorded in the run's device ledger (`mirl.runner.devices`; CPU time not counted)."""
    from mirl.runner.devices import is_gpu, read_device_time

    return sum(float(d.get("seconds", 0)) * int(d.get("count", 1) or 1) for d in read_device_time(run_dir)
               if d.get("stage") == stage and is_gpu(str(d.get("device", "")))) / 3600


def save_checkpoint(stage: TrainingStage, engine: EmbeddedEngine, step: int, draws: int, digest: str) -> Path:
    t = stage.params.training
    path = ckpt.save(stage.checkpoints, step, engine.save,
                     {"draws": draws, "recipe": t.recipe, "digest": digest, "time": time.time()})
    ckpt.drop_resume_state(stage.checkpoints, step)
    ckpt.prune(stage.checkpoints, t.keep_checkpoints, protect=selectable(stage) if t.keep_checkpoints else ())
    return path


def selectable(stage: TrainingStage) -> list[int]:
    """The checkpoints the selection would pick from now (the top by smoothed reward): pruning
    spares them, or the selection could only choose among the newest."""
    t = stage.params.training
    rows = read_jsonl(stage.out / METRICS)[0] if (stage.out / METRICS).exists() else []
    saved = [s for s, _ in ckpt.list_checkpoints(stage.checkpoints)]
    return [r["step"] for r in ckpt.top_by_reward(rows, saved, t.select_top, t.smoothing)]


def finalize(stage: TrainingStage, stopped: str | None, skipped: dict[str, int], starts: list[Start]) -> dict[str, Any]:
    """The checkpoint selection (`selection.json`) and the training summary's own fields."""
    t = stage.params.training
    rows, _ = read_jsonl(stage.out / METRICS)
    saved = [s for s, _ in ckpt.list_checkpoints(stage.checkpoints)]
    top = ckpt.top_by_reward(rows, saved, t.select_top, t.smoothing)
    selection = {"top": top, "window": t.smoothing, "checkpoints": saved, "selected": top[0]["step"] if top else None,
                 "by": "smoothed training reward"}
    done_all = bool(rows) and max(int(r["step"]) for r in rows) >= t.steps and stopped is None
    atomic_write_json(stage.out / SELECTION, selection)
    if done_all and t.validation_tasks and top:
        from mirl.training.selection import validate

        selection = validate(stage.params, stage.out, sandbox=stage._sandbox)
        selection["by"] = "validation reward of the top checkpoints"
        atomic_write_json(stage.out / SELECTION, selection)
    done = max((int(r["step"]) for r in rows), default=0)
    return {"recipe": t.recipe, "steps": t.steps, "done": done, "complete": done >= t.steps and stopped is None,
            "stopped": stopped, "starts": len(starts), "environments": len({s.env for s in starts}),
            "starts_left_out": skipped, "checkpoints": saved, "selected": selection["selected"],
            "rollouts": sum(int(r.get("rollouts", 0)) for r in rows),
            "mean_dead_share": round(sum(r["dead_share"] or 0 for r in rows) / len(rows), 4) if rows else None}


def load_metrics(run_dir: str | Path):
    """The metrics of a training run as a DataFrame (one row per step)."""
    import pandas as pd

    from mirl.runner.layout import RunDir

    rows, _ = read_jsonl(RunDir(run_dir).file(STAGE, METRICS))
    return pd.DataFrame(rows)


def worker_player(params: Any, run_dir: str, misbehaviors: dict, envs: list[str], tasks: dict | None = None):
    """The rollout player of a Ray actor, made in the actor from the run's params: its own LLM client
    (the ledger is the run's), sandbox, task pool and judges."""
    from mirl.llm.client import LLMClient

    stage = TrainingStage(params, run_dir, tasks=tasks)
    client = LLMClient(stage.llm_config(), run_dir=stage.run.root, stage=STAGE)
    return stage.player(client, misbehaviors, envs=envs)
