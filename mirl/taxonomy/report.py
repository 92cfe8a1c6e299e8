"""Tables and figures of a taxonomy version, for notebook 02 (cells stay one-liners)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import Label, Taxonomy
from mirl.taxonomy import stats


@dataclass
class Review:
    """One taxonomy version with its labels, error steps and per-type statistics."""

    taxonomy: Taxonomy
    labels: list[Label]
    steps: list[ErrorStep]
    table: pd.DataFrame
    profiled_envs: int | None = None  # environments profiled (the share of environments is of these); None: unknown

    @property
    def union_coverage(self) -> float:
        return stats.union_coverage(self.labels, [t.name for t in self.taxonomy.kept()], len(self.steps))

    @property
    def union_env_coverage(self) -> float:
        return stats.union_env_coverage(self.labels, [t.name for t in self.taxonomy.kept()], self.steps,
                                        self.profiled_envs)


def load(params, run_dir: str | Path, version: int | None = None) -> Review:
    """A version (default: the latest) of the run's taxonomy, with the error steps the stage read."""
    from mirl.taxonomy.stage import TaxonomyStage

    stage = TaxonomyStage(params, run_dir)
    taxonomy, labels = stage.store.load(version), stage.store.load_labels(version)
    steps, profiled = stage.steps(), stage.profiled_environments()
    return Review(taxonomy, labels, steps, stats.type_stats(taxonomy, labels, steps, profiled), profiled)


def table2(review: Review) -> pd.DataFrame:
    return stats.table2(review.table, review.labels, review.steps, review.profiled_envs)


def figure4(review: Review):
    of = "profiled environments" if review.profiled_envs is not None else "environments with an error step"
    return stats.figure4(review.table, review.taxonomy.threshold, of)


def examples(review: Review, per_type: int = 3) -> pd.DataFrame:
    """The kept misbehaviors, each with a few of its error steps (command, description, reason)."""
    by_id = {s.id: s for s in review.steps}
    rows = []
    for t in review.taxonomy.kept():
        carrying = [lb.id for lb in review.labels if t.name in lb.types]
        for i in (t.examples + [x for x in carrying if x not in t.examples])[:per_type]:
            s = by_id.get(i)
            if s is not None:
                rows.append({"type": t.name, "id": i, "command": (s.rejected_command or "(no command)")[:160],
                             "description": s.description[:120], "reason": s.reason[:200]})
    return pd.DataFrame(rows, columns=["type", "id", "command", "description", "reason"])


def agreement(review: Review) -> pd.DataFrame:
    """Cohen's kappa between each annotator type and the rule detector that matches it best."""
    table = stats.rule_agreement(review.labels, review.steps, review.taxonomy)
    if table.empty:
        return table
    best = table.sort_values("kappa", ascending=False).groupby("type", as_index=False).first()
    return best.sort_values("kappa", ascending=False).reset_index(drop=True)
