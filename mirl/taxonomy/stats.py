"""Statistics of a labelled taxonomy: shares, union coverage, which types are kept, agreement.

A step can carry several types, so the coverage of a set of types is the share of steps carrying
at least one of them (the union), not the sum of their shares. A type's share of environments is
taken of every profiled environment (the paper's Table 2: "of the 2,017 profiled environments"),
not only of those with an error step; where the number of profiled environments is unknown (error
steps made elsewhere), of the environments that have an error step, and the table says so.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from mirl.evaluate.stats.agreement import cohens_kappa
from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import Label, Taxonomy


def env_denominator(steps: list[ErrorStep], profiled: int | None = None) -> int:
    """The environments a share of environments is taken of: the profiled ones (`profiled`), else
    those with an error step. Fewer profiled environments than have error steps is an error."""
    with_errors = len({s.env for s in steps})
    if profiled is None:
        return with_errors
    if profiled < with_errors:
        raise ValueError(f"{profiled} profiled environment(s), but error steps come from {with_errors}")
    return profiled


def type_stats(taxonomy: Taxonomy, labels: list[Label], steps: list[ErrorStep],
               profiled_envs: int | None = None) -> pd.DataFrame:
    """One row per type: steps, share of error steps, environments, share of environments (of the
    `profiled_envs` profiled environments; None: of those with an error step), status."""
    env_of = {s.id: s.env for s in steps}
    n_steps, n_envs = len(steps), env_denominator(steps, profiled_envs)
    ids_of: dict[str, set[str]] = defaultdict(set)
    for label in labels:
        for t in label.types:
            ids_of[t].add(label.id)
    rows = []
    for t in taxonomy.types:
        ids = ids_of.get(t.name, set())
        envs = {env_of[i] for i in ids if i in env_of}
        rows.append({"type": t.name, "steps": len(ids), "share": len(ids) / n_steps if n_steps else 0.0,
                     "envs": len(envs), "env_share": len(envs) / n_envs if n_envs else 0.0,
                     "status": t.status, "definition": t.definition})
    df = pd.DataFrame(rows, columns=["type", "steps", "share", "envs", "env_share", "status", "definition"])
    return df.sort_values(["share", "type"], ascending=[False, True]).reset_index(drop=True)


def union_coverage(labels: list[Label], types: list[str], n_steps: int) -> float:
    """Share of error steps that carry at least one of `types`."""
    wanted = set(types)
    covered = sum(1 for label in labels if wanted & set(label.types))
    return covered / n_steps if n_steps else 0.0


def union_env_coverage(labels: list[Label], types: list[str], steps: list[ErrorStep],
                       profiled_envs: int | None = None) -> float:
    """Share of environments (of `env_denominator`) with at least one error step carrying one of `types`."""
    wanted, env_of = set(types), {s.id: s.env for s in steps}
    envs = {env_of[lb.id] for lb in labels if lb.id in env_of and wanted & set(lb.types)}
    n = env_denominator(steps, profiled_envs)
    return len(envs) / n if n else 0.0


def apply_threshold(taxonomy: Taxonomy, stats: pd.DataFrame, threshold: float) -> Taxonomy:
    """Mark types covering at least `threshold` of error steps as kept, the rest long tail (pinned ones
    keep the status a person gave them)."""
    share = dict(zip(stats["type"], stats["share"]))
    for t in taxonomy.types:
        if not t.pinned:
            t.status = "kept" if share.get(t.name, 0.0) >= threshold else "long_tail"
    taxonomy.threshold = threshold
    return taxonomy


def table2(stats: pd.DataFrame, labels: list[Label], steps: list[ErrorStep], profiled_envs: int | None = None
           ) -> pd.DataFrame:
    """The paper's Table 2: the kept misbehaviors with definition, share of error steps and of
    environments (`env_denominator`), and the union of the kept types on both."""
    kept = stats[stats["status"] == "kept"][["type", "definition", "share", "env_share"]].copy()
    names = list(kept["type"])
    total = pd.DataFrame([{"type": "union of kept types", "definition": "",
                           "share": union_coverage(labels, names, len(steps)),
                           "env_share": union_env_coverage(labels, names, steps, profiled_envs)}])
    out = pd.concat([kept, total], ignore_index=True)
    out.attrs["environments"] = env_denominator(steps, profiled_envs)
    out.attrs["of"] = "profiled environments" if profiled_envs is not None else "environments with an error step"
    return out


def figure4(stats: pd.DataFrame, threshold: float, environments: str = "environments"):
    """The paper's Figure 4, two panels: each type's share of error steps (kept vs long tail, with the
    threshold) and its share of environments (`environments` names what the share is of)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.35 * max(len(stats), 3) + 1.2), sharey=True)
    if stats.empty:
        left.text(0.5, 0.5, "no error types", ha="center", va="center", transform=left.transAxes)
        return fig
    palette = {"kept": "#2a6fdb", "long_tail": "#b0b0b0", "candidate": "#e0a030"}
    for ax, x, label in ((left, "share", "share of error steps"), (right, "env_share", f"share of {environments}")):
        sns.barplot(data=stats, y="type", x=x, hue="status", palette=palette, dodge=False, ax=ax, legend=ax is right)
        ax.set_xlabel(label)
        ax.set_ylabel("")
    left.axvline(threshold, color="black", linestyle="--", linewidth=1)
    left.set_title(f"Error steps (kept: share >= {threshold:.0%})")
    right.set_title("Environments in which the type appears")
    fig.tight_layout()
    return fig


def rule_agreement(labels: list[Label], steps: list[ErrorStep], taxonomy: Taxonomy) -> pd.DataFrame:
    """Per annotator type, Cohen's kappa with each rule detector's flags; the best-matching detector."""
    from mirl.roles.annotator_offline import rule_sources

    rules_of = {s.id: set(rule_sources(s)) for s in steps}
    detectors = sorted({d for ds in rules_of.values() for d in ds})
    types_of = {label.id: set(label.types) for label in labels}
    ids = [s.id for s in steps]
    rule_type_names = {t.name for t in taxonomy.types if t.provenance.startswith("rules:")}
    rows = []
    for t in taxonomy.types:
        if t.name in rule_type_names:
            continue
        has = [t.name in types_of.get(i, set()) for i in ids]
        for d in detectors:
            flagged = [d in rules_of[i] for i in ids]
            rows.append({"type": t.name, "detector": d, "kappa": cohens_kappa(has, flagged),
                         "both": sum(x and y for x, y in zip(has, flagged))})
    return pd.DataFrame(rows, columns=["type", "detector", "kappa", "both"])
