"""The benchmark stage: each policy plays every task of a task set R times from step 0, and is
scored the ways papers and leaderboards score agents, beside runs made by other tools.

Plan: (policy, task, run) for every policy (in order, so one policy's engine serves a block of
items), task (the first `max_tasks` by id) and run r < `runs` (episode seed `seed + r`, the same
for every policy). One item is one episode through `mirl.agent.episode.run_episode`, verified.
Episodes whose sandbox failed are played again on the next run; so are those of a policy that now
resolves to another model (a new training selection).

`sources` adds trials that other tools ran (Harbor job directories, Terminal-Bench 1 run
directories, read by `mirl.sources`), each agent/model found there scored as one more policy
(named `<agent>/<model>`); a task's trials there are its runs, in trial-name order.

Finalize, under `runs/<run>/pass_at_k/`:
    episodes.jsonl   one record per item: reward, error, exit reason, steps, the trajectory
    trials.csv       every trial scored: policy, task, run, reward, error, origin (played or a source path)
    scores.csv       per policy: mean +- SE over runs (`run_scores`) and the leaderboard score, SE and
                     95% interval (`leaderboard_score`), under the stated `errored` rule
    passk.csv        per policy and k = 1..R: unbiased pass@k, its task-clustered SE (`pass_at_k_table`)
    passk_tasks.csv  per policy and task: trials n, passes c, pass@k
    paired.csv       each policy minus the first, on the tasks both have (`paired_difference`)
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from mirl.evaluate.policies import policy_config, resolve_all, short_name, stale, weights_id
from mirl.runner.inputs import EpisodeInputs
from mirl.runner.layout import atomic_write
from mirl.runner.stage import Item, Stage, StageError, run_stage

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "pass_at_k"
EPISODES, TRIALS, SCORES, PASSK, PASSK_TASKS, PAIRED = (
    "episodes.jsonl", "trials.csv", "scores.csv", "passk.csv", "passk_tasks.csv", "paired.csv")
TRIAL_COLUMNS = ["policy", "model", "task", "run", "reward", "error", "origin"]
SCORE_COLUMNS = ["policy", "model", "n_tasks", "n_runs", "n_trials", "n_errored", "run_mean", "run_se",
                 "score", "se", "ci_low", "ci_high", "n_single", "dropped_tasks", "errored_rule"]
PAIRED_COLUMNS = ["policy", "baseline", "n_tasks", "difference", "se", "ci_low", "ci_high", "only_policy",
                  "only_baseline", "note"]


class PassAtKStage(EpisodeInputs, Stage):
    name = STAGE
    records = EPISODES
    key_fields = ("policy", "task", "run")
    derived = (TRIALS, SCORES, PASSK, PASSK_TASKS, PAIRED)

    def __init__(self, params: Params, run_dir, sandbox=None, tasks=None):
        super().__init__(params, run_dir)
        self._sandbox, self._tasks = sandbox, tasks
        self._lock = threading.Lock()
        self._models: dict[str, Any] = {}
        self._policies: dict[str, str] | None = None
        self._weights: dict[str, str | None] = {}
        self.passed = self.played = 0

    # --- what the results depend on ------------------------------------------------------------------

    def agent(self):
        s = self.params.pass_at_k
        return replace(self.params.agent, max_steps=s.max_steps or self.params.agent.max_steps, verify=True)

    def fingerprint(self) -> dict[str, Any]:
        from mirl.agent.rollout import role_fingerprint, sandbox_fingerprint

        s = self.params.pass_at_k
        policy = role_fingerprint(policy_config(self.params, "", s.temperature, s.top_p), "policy")
        policy.pop("model")  # the policies are the records' keys: adding one extends the run
        return {"pass_at_k": {"seed": s.seed}, "models": {"policy": policy}, "agent": asdict(self.agent()),
                "sandbox": sandbox_fingerprint(self.params.sandbox)}

    # --- inputs ----------------------------------------------------------------------------------------

    def policies(self) -> dict[str, str]:
        if self._policies is None:
            self._policies = resolve_all(list(self.params.pass_at_k.policies), self.run, self.params)
        return self._policies

    def weights(self, policy: str) -> str | None:
        """The identity of a policy's checkpoint weights (`weights_id`), worked out once per run."""
        if policy not in self._weights:
            self._weights[policy] = weights_id(self.policies()[policy])
        return self._weights[policy]

    def tasks(self) -> dict[str, Any]:
        if self._tasks is None:
            from mirl.agent.rollout import RolloutConfig, RolloutError, load_tasks

            s = self.params.pass_at_k
            try:
                tasks = load_tasks(RolloutConfig(tasks=[t.strip() for t in s.tasks.split(",") if t.strip()]))
            except RolloutError as e:
                raise StageError(f"pass_at_k.tasks: {e}") from None
            tasks = sorted(tasks, key=lambda t: t.id)
            self._tasks = tasks[: s.max_tasks] if s.max_tasks else tasks
        return {t.id: t for t in self._tasks}

    def plan(self) -> list[Item]:
        s = self.params.pass_at_k
        tasks = self.tasks()
        multi = sorted(t for t, task in tasks.items() if task.steps)
        if multi:
            raise StageError(f"pass_at_k.tasks: {', '.join(multi)} are multi-step tasks, which the agent loop does "
                             "not play; leave them out")
        # policies innermost: a stage stopped early still compares every policy on the same tasks
        return [Item((policy, task, r), {"policy": policy, "task": task, "run": r})
                for r in range(s.runs) for task in sorted(tasks) for policy in self.policies()]

    def redo(self, record: dict[str, Any]) -> bool:
        if record.get("exit_reason") == "error":
            return True
        model = self.policies().get(record.get("policy"))
        if model is None:
            return False
        return stale(record, model, self.weights(record["policy"]))

    # --- one episode ------------------------------------------------------------------------------------

    def model(self, policy: str):
        from mirl.llm.client import LLMClient

        with self._lock:
            if policy not in self._models:
                s = self.params.pass_at_k
                cfg = policy_config(self.params, self.policies()[policy], s.temperature, s.top_p)
                self._models[policy] = LLMClient(cfg, run_dir=self.run.root, stage=STAGE).model("policy")
            return self._models[policy]

    def run_item(self, payload: dict[str, Any]) -> dict[str, Any]:
        from mirl.agent.episode import run_episode

        policy, task, r = payload["policy"], payload["task"], int(payload["run"])
        seed = self.params.pass_at_k.seed + r
        traj = run_episode(self.tasks()[task], self.sandbox(), self.model(policy), self.agent(), seed=seed)
        error = traj.error or traj.verifier_error or None
        return {"policy": policy, "model": self.policies()[policy], "weights": self.weights(policy), "task": task,
                "run": r, "seed": seed,
                "reward": traj.reward, "error": error, "exit_reason": traj.exit_reason, "steps": len(traj.steps),
                "trajectory": traj.to_dict()}

    # --- finalize ----------------------------------------------------------------------------------------

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        self.played += 1
        self.passed += (record.get("reward") or 0) >= self.params.pass_at_k.threshold
        return {"policy": record["policy"], "passed": f"{self.passed}/{self.played}"}

    def source_trials(self) -> tuple[list[dict[str, Any]], list[str]]:
        return read_source_trials(self.params.pass_at_k.sources)

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        planned = {i.key for i in self.plan()}
        played = [{"policy": r["policy"], "model": r["model"], "task": r["task"], "run": r["run"],
                   "reward": r.get("reward"), "error": r.get("error") or None, "origin": "played"}
                  for r in records if self.key(r) in planned]
        imported, problems = self.source_trials()
        clash = sorted({t["policy"] for t in imported} & set(self.policies()))
        if clash:
            raise StageError(f"pass_at_k.sources: policy name(s) {clash} found in the sources are also "
                             "policies played here")
        trials = played + imported
        atomic_write(self.out / TRIALS, pd.DataFrame(trials, columns=TRIAL_COLUMNS).to_csv(index=False))
        s = self.params.pass_at_k
        order = [p for p in self.policies()] + sorted({t["policy"] for t in imported})
        scores, passk, per_task, paired = score_tables(trials, order, s.errored, s.threshold)
        for name, table in ((SCORES, scores), (PASSK, passk), (PASSK_TASKS, per_task), (PAIRED, paired)):
            atomic_write(self.out / name, table.to_csv(index=False))
        return {"policies": self.policies(), "labels": {p: short_name(p, m) for p, m in self.policies().items()},
                "sources": sorted({t["policy"] for t in imported}), "source_problems": problems,
                "tasks": len(self.tasks()), "trials": len(trials),
                "score": {r.policy: None if pd.isna(r.score) else round(float(r.score), 4) for r in scores.itertuples()}}


def read_source_trials(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Trials of runs other tools made, as rows of trials.csv, and a line per trial that could not be read."""
    from mirl.sources import find_sources, read_source
    from mirl.sources.base import TrajectoryFileError

    found, problems = [], []
    for p in paths:
        if not Path(p).exists():
            raise StageError(f"pass_at_k.sources: no such file or directory: {p}")
        for src in find_sources([p]):
            try:
                trajs = read_source(src)
            except TrajectoryFileError as e:
                problems.append(str(e))
                log.warning("pass_at_k: a source trial was left out: %s", e)
                continue
            for t in trajs:
                found.append((source_policy(t), t, str(src)))
    by_task: dict[tuple[str, str], list[tuple[str, Any]]] = defaultdict(list)
    for policy, t, src in found:
        by_task[(policy, t.task)].append((src, t))
    rows = []
    for (policy, task), trials in sorted(by_task.items()):
        for run, (src, t) in enumerate(sorted(trials, key=lambda x: x[0])):
            model = (t.models or {}).get("policy") or ""
            rows.append({"policy": policy, "model": model, "task": task, "run": run, "reward": t.reward,
                         "error": t.error or t.verifier_error or None, "origin": src})
    return rows, problems


def source_policy(traj) -> str:
    """`<agent>/<model>` of a trial another tool ran (either alone when the other is unknown)."""
    meta = traj.meta or {}
    agent = ((meta.get("harbor") or {}).get("agent") or {}).get("name") or meta.get("agent") or ""
    model = (traj.models or {}).get("policy") or ""
    return "/".join(x for x in (agent, model) if x) or "unknown"


def score_tables(trials: list[dict[str, Any]], order: list[str], errored: str = "zero", threshold: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(scores, pass@k summary, pass@k per task, paired differences vs the first policy) of the trials."""
    from mirl.evaluate.stats.passk import pass_at_k_table
    from mirl.evaluate.stats.scores import leaderboard_score, paired_difference, run_scores

    by_policy = {p: [t for t in trials if t["policy"] == p] for p in order}
    by_policy = {p: ts for p, ts in by_policy.items() if ts}
    scores, passk, per_task, paired = [], [], [], []
    for policy, ts in by_policy.items():
        model = ts[0].get("model") or ""
        row: dict[str, Any] = {"policy": policy, "model": model, "n_tasks": len({t["task"] for t in ts}),
                               "n_runs": len({t["run"] for t in ts}), "n_trials": len(ts),
                               "n_errored": sum(t["reward"] is None or bool(t["error"]) for t in ts),
                               "errored_rule": errored}
        try:
            rs = run_scores(ts, errored)
            lb = leaderboard_score(ts, errored)
        except ValueError as e:  # every trial errored and the rule drops them all
            log.warning("pass_at_k: %s has no score: %s", policy, e)
            scores.append(row)
            continue
        row.update(run_mean=rs.mean, run_se=rs.se, score=lb.score, se=lb.se, ci_low=lb.ci_low, ci_high=lb.ci_high,
                   n_single=lb.n_single, dropped_tasks=",".join(map(str, lb.dropped_tasks)))
        scores.append(row)
        most = int(pd.Series([t["task"] for t in ts]).value_counts().max())  # k up to the most runs of a task
        table = pass_at_k_table(ts, range(1, most + 1), threshold=threshold, errored=errored)
        passk.append(table.summary.assign(policy=policy))
        per_task.append(table.per_task.assign(policy=policy))
    first = next(iter(by_policy), None)
    for policy, ts in by_policy.items():
        if policy == first:
            continue
        try:
            d = paired_difference(ts, by_policy[first], errored)
        except ValueError as e:
            paired.append({"policy": policy, "baseline": first, "n_tasks": 0, "difference": math.nan, "se": math.nan,
                           "ci_low": math.nan, "ci_high": math.nan, "note": str(e)})
            continue
        paired.append({"policy": policy, "baseline": first, "n_tasks": d.n_tasks, "difference": d.difference,
                       "se": d.se, "ci_low": d.ci_low, "ci_high": d.ci_high, "only_policy": ",".join(map(str, d.only_a)),
                       "only_baseline": ",".join(map(str, d.only_b)), "note": ""})

    def cat(frames: list[pd.DataFrame], first_cols: list[str]) -> pd.DataFrame:
        if not frames:
            return pd.DataFrame(columns=first_cols)
        df = pd.concat(frames, ignore_index=True)
        return df[first_cols + [c for c in df.columns if c not in first_cols]]

    return (pd.DataFrame(scores, columns=SCORE_COLUMNS), cat(passk, ["policy", "k"]),
            cat(per_task, ["policy", "task", "n", "c"]), pd.DataFrame(paired, columns=PAIRED_COLUMNS))


def load_table(run_dir: str | Path, name: str) -> pd.DataFrame:
    from mirl.runner.layout import RunDir

    path = RunDir(run_dir).file(STAGE, name)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not written yet (run the pass_at_k stage first)")
    return pd.read_csv(path)


def run_pass_at_k(params: Params, run_dir: str | Path, sandbox=None, tasks=None, force: bool = False,
                  progress: bool = True) -> dict[str, Any]:
    return run_stage(PassAtKStage(params, run_dir, sandbox=sandbox, tasks=tasks), force=force, progress=progress)
