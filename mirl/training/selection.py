"""Checkpoint selection as the paper does it: the top N checkpoints by smoothed training reward
(`mirl.training.checkpoints.top_by_reward`), then the best of them on a validation task set.

The validation tasks are `validation_tasks` (task dirs, or a directory of them: the paper uses TB-Lite),
restricted to `validation_ids` when given. Each candidate plays `validation_seeds` episodes of every
validation task from step 0 (through the
rollout runner, so a killed validation resumes), served as `local/<checkpoint dir>`; its score is the
mean verifier reward over the episodes that did not fail for infrastructure reasons. The best score
wins (ties: the higher smoothed training reward). Written into `selection.json`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirl.runner.layout import atomic_write_json

if TYPE_CHECKING:
    from mirl.params import Params


def validation_pool(tasks: str, ids: list[str]) -> list[str]:
    """The validation task dirs: every task under `tasks` (comma-separated dirs, or a directory of
    tasks), only those with an id in `ids` when given (an id found nowhere there is an error naming it)."""
    from mirl.agent.rollout import RolloutConfig, load_tasks

    where = [x.strip() for x in tasks.split(",") if x.strip()]
    if not where:
        return []
    return sorted(str(t.path) for t in load_tasks(RolloutConfig(tasks=where, task_ids=list(ids))))


def validate(params: Params, training_dir: Path, sandbox=None, progress: bool = False) -> dict[str, Any]:
    """Score the candidates of `training_dir/selection.json` on `training.validation_tasks`; returns the
    updated selection (also written back)."""
    from mirl.agent.rollout import RolloutConfig, run_rollouts
    from mirl.engines import registry
    from mirl.runner.inputs import checkpoint_dir

    t = params.training
    path = Path(training_dir) / "selection.json"
    selection = json.loads(path.read_text())
    pool = validation_pool(t.validation_tasks, t.validation_ids)
    if not pool or not selection.get("top"):
        return selection
    scores = []
    for cand in selection["top"]:
        ckpt = checkpoint_dir(Path(training_dir) / "checkpoints", cand["step"]).resolve()
        llm = copy.deepcopy(params.models)
        llm.policy.model = f"local/{ckpt}"
        config = RolloutConfig(tasks=pool, seeds=t.validation_seeds, out=str(Path(training_dir) / "validation" / ckpt.name),
                               ledger_dir=str(Path(training_dir).parent), stage="training", workers=t.workers,
                               progress=progress, agent=params.agent, sandbox=params.sandbox, llm=llm)
        try:
            result = run_rollouts(config, sandbox=sandbox)
        finally:
            registry.forget(str(ckpt))  # one candidate's weights in memory at a time
        from mirl.jsonl import read_jsonl

        rows, _ = read_jsonl(result.path)
        rewards = [r["reward"] for r in rows if r.get("exit_reason") != "error" and r.get("reward") is not None]
        scores.append({**cand, "validation_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
                       "episodes": len(rewards)})
    ranked = sorted([s for s in scores if s["validation_reward"] is not None],
                    key=lambda s: (s["validation_reward"], s["smoothed_reward"]), reverse=True)
    selection.update(validation=scores, validation_tasks=pool, selected=ranked[0]["step"] if ranked else None)
    atomic_write_json(path, selection)
    return selection
