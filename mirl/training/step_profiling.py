"""PivotRL's preprocessing, step profiling: which steps of reference trajectories are worth training on.

The paper's PivotRL baseline (Table 1: 3,892 candidate steps, 8 actions per pivot, 1,242 pivots kept
from 189 environments) samples several actions at every candidate step and keeps the steps where
these actions get different rewards; only those pivots are trained on, with one-step updates. Here:

    candidates   every command step of every reference trajectory (a profiling trajectory that passed
                 its tests and stored its token ids, `mirl.training.pivot.pivot_candidates`) in the
                 environments the training stage draws (`training.environments`, the same draw as
                 TMax-189 and RaR+)
    one item     `step_profiling.actions` actions sampled from exactly the prompt the reference's sampler
                 saw at that step, each rewarded by the recipe's step judge (`training.pivot_judge`)
    kept         a candidate whose valid actions do not all get the same reward

The stage runs on the common runner (resumable by candidate, fingerprinted) before PivotRL's training
(`run_training` calls it), and counts as preprocessing in the cost report: every sampled action is a
one-step rollout there. Written under `runs/<run>/step_profiling/`:

    candidates.jsonl  one record per candidate: its rewards, whether it is kept, the tokens it used
    pivots.jsonl      the kept pivots (what training starts from)
    params.json, summary.json   as every stage
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirl.jsonl import read_jsonl
from mirl.runner.inputs import EpisodeInputs, task_pool
from mirl.runner.layout import RunDir, atomic_write_jsonl
from mirl.runner.stage import Item, Stage, StageError, run_stage
from mirl.training.params import pivot_judge_calls_llm

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "step_profiling"
CANDIDATES, PIVOTS = "candidates.jsonl", "pivots.jsonl"


def step_judge(client: Any, kind: str):
    """The step-equivalence judge of `training.pivot_judge`."""
    from mirl.roles.step_judge import DifflibStepJudge, LLMStepJudge, MatchThenLLMStepJudge

    if kind == "llm":
        return LLMStepJudge(client)
    if kind == "difflib+llm":
        return MatchThenLLMStepJudge(LLMStepJudge(client))
    return DifflibStepJudge()


class StepProfilingStage(EpisodeInputs, Stage):
    name = STAGE
    records = CANDIDATES
    key_fields = ("id",)
    reads = ("profiling",)
    derived = (PIVOTS,)

    def __init__(self, params: Params, run_dir, tasks=None, generator=None):
        super().__init__(params, run_dir)
        self._tasks = tasks
        self._client, self._generator = None, generator  # a token-level policy (tests); else models.policy's

    def llm_config(self):
        from mirl.training.params import training_llm_config

        return training_llm_config(self.params)

    def fingerprint(self) -> dict[str, Any]:
        from mirl.agent.rollout import role_fingerprint

        t, s = self.params.training, self.params.step_profiling
        llm = self.llm_config()
        roles = {"policy": role_fingerprint(llm, "policy")}
        if pivot_judge_calls_llm(t.pivot_judge):
            roles["step_judge"] = role_fingerprint(llm, "step_judge")
        return {"step_profiling": {"actions": s.actions, "min_reward": s.min_reward},
                "training": {"environments": t.environments, "environments_seed": t.environments_seed,
                             "pivot_judge": t.pivot_judge, "temperature": t.temperature, "seed": t.seed,
                             "tasks": t.tasks},
                "models": roles}

    # --- inputs ------------------------------------------------------------------------------------

    def tasks(self) -> dict[str, Any]:
        """The training stage's task pool: `training.tasks`, else the pool profiling ran on."""
        t = self.params.training
        if self._tasks is None:
            self._tasks = task_pool(self.run, t.tasks or self.params.profiling.tasks, prefer_stored=not t.tasks)
        return {x.id: x for x in self._tasks}

    def environments(self) -> list[str]:
        """The environments drawn for the baselines (`mirl.training.environments`): the training stage's draw."""
        from mirl.training.environments import draw, pool

        t = self.params.training
        ids, _ = pool(list(self.tasks()), [k[0] for k in self.trajectories()], bool(t.tasks))
        return draw(ids, t.environments, t.environments_seed)

    def plan(self) -> list[Item]:
        from mirl.training.pivot import pivot_candidates

        drawn = set(self.environments())
        refs = [x for x in self.trajectories().values() if x.task in drawn]
        pivots = pivot_candidates(refs, self.params.step_profiling.min_reward)
        if not pivots:
            raise StageError(f"step profiling: no reference trajectory (reward >= {self.params.step_profiling.min_reward}, "
                             f"with token ids) in the {len(drawn)} drawn environment(s); PivotRL has nothing to train on")
        return [Item((p.id,), {"task": p.task, "seed": p.seed, "step": p.step}) for p in pivots]

    # --- one candidate -----------------------------------------------------------------------------

    def resources(self):
        if self._client is None:
            from mirl.llm.client import LLMClient

            self._client = LLMClient(self.llm_config(), run_dir=self.run.root, stage=STAGE)
            self._generator = self._generator or self._client.generator("policy")
            if self._generator is None:
                raise StageError(f"step profiling needs a token-level policy in this process (models.policy.model "
                                 f"local/...), got {self.params.models.policy.model!r}")
            self._judge = step_judge(self._client, self.params.training.pivot_judge)
        return self._generator, self._judge

    def run_item(self, payload: dict[str, Any]) -> dict[str, Any]:
        from mirl.runner.devices import record_device_time
        from mirl.training.advantages import is_dead
        from mirl.training.pivot import Pivot, pivot_group
        from mirl.training.rollouts import rollout_seed

        pivot = Pivot(payload["task"], int(payload["seed"]), int(payload["step"]))
        generator, judge = self.resources()
        n = self.params.step_profiling.actions
        ref = self.trajectories()[(pivot.task, pivot.seed)]
        t0 = time.perf_counter()
        seed = rollout_seed(self.params.training.seed, hash_index(pivot.id), 0, n)
        g = pivot_group(pivot, ref, generator, judge, n=n, sampling={"seed": seed})
        seconds = time.perf_counter() - t0
        engine = getattr(generator, "engine", None)
        record_device_time(self.run.root, STAGE, seconds, device=getattr(engine, "device", "cpu"), part="sampling")
        return {"id": pivot.id, "task": pivot.task, "seed": pivot.seed, "step": pivot.step,
                "reference": ref.steps[pivot.step].command, "rewards": list(g.rewards), "valid": list(g.valid),
                "kept": not is_dead(g), "prompt_tokens": len(g.rollouts[0].prompt_ids) if g.rollouts else 0,
                "completion_tokens": [len(a.completion_ids) for a in g.rollouts], "seconds": round(seconds, 4)}

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"last": "kept" if record.get("kept") else "dead"}

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        kept = [r for r in records if r.get("kept")]
        atomic_write_jsonl(self.out / PIVOTS, kept)
        return {"candidates": len(records), "pivots": len(kept), "actions": self.params.step_profiling.actions,
                "environments": len({r["task"] for r in records}), "pivot_environments": len({r["task"] for r in kept}),
                "drawn_environments": len(self.environments())}


def hash_index(text: str) -> int:
    """A stable small integer of a candidate's id (its sampling seed does not depend on the plan's order)."""
    import hashlib

    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def load_pivots(run_dir: str | Path) -> list[dict[str, Any]]:
    """The kept pivots of a run's step profiling, in the order they were planned."""
    path = RunDir(run_dir).file(STAGE, PIVOTS)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no pivots (PivotRL's step profiling has not run)")
    return read_jsonl(path)[0]


def run_step_profiling(params: Params, run_dir: str | Path, tasks=None, force: bool = False,
                       progress: bool = True, generator=None) -> dict[str, Any]:
    return run_stage(StepProfilingStage(params, run_dir, tasks=tasks, generator=generator), force=force,
                     progress=progress)
