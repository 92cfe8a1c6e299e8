"""Statistics of a labelled taxonomy: shares, union coverage, which types are kept, agreement.

A step can carry several types, so the coverage of a set of types is the share of steps carrying
at least one of them (the union), not the sum of their shares.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import Label, Taxonomy


def type_stats(taxonomy: Taxonomy, labels: list[Label], steps: list[ErrorStep]) -> pd.DataFrame:
    """One row per type: steps, share of error steps, environments, share of environments, status."""
    env_of = {s.id: s.env for s in steps}
    n_steps, n_envs = len(steps), len({s.env for s in steps})
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


def apply_threshold(taxonomy: Taxonomy, stats: pd.DataFrame, threshold: float) -> Taxonomy:
    """Mark types covering at least `threshold` of error steps as kept, the rest long tail (pinned ones
    keep the status a person gave them)."""
    share = dict(zip(stats["type"], stats["share"]))
    for t in taxonomy.types:
        if not t.pinned:
            t.status = "kept" if share.get(t.name, 0.0) >= threshold else "long_tail"
    taxonomy.threshold = threshold
    return taxonomy


def table2(stats: pd.DataFrame, labels: list[Label], n_steps: int) -> pd.DataFrame:
    """The paper's Table 2: the kept misbehaviors with definition and share, and their union coverage."""
    kept = stats[stats["status"] == "kept"][["type", "definition", "share", "env_share"]].copy()
    union = union_coverage(labels, list(kept["type"]), n_steps)
    total = pd.DataFrame([{"type": "union of kept types", "definition": "", "share": union, "env_share": float("nan")}])
    return pd.concat([kept, total], ignore_index=True)


def figure4(stats: pd.DataFrame, threshold: float, ax=None):
    """The paper's Figure 4: share of error steps per type, kept vs long tail, with the threshold."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.35 * max(len(stats), 3) + 1))
    if stats.empty:
        ax.text(0.5, 0.5, "no error types", ha="center", va="center", transform=ax.transAxes)
        return ax.figure
    palette = {"kept": "#2a6fdb", "long_tail": "#b0b0b0", "candidate": "#e0a030"}
    sns.barplot(data=stats, y="type", x="share", hue="status", palette=palette, dodge=False, ax=ax)
    ax.axvline(threshold, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("share of error steps")
    ax.set_ylabel("")
    ax.set_title(f"Error types (kept: share >= {threshold:.0%})")
    return ax.figure


def cohen_kappa(a: list, b: list) -> float:
    """Cohen's kappa of two raters over the same items (scikit-learn's); nan when both are constant."""
    import warnings

    from sklearn.metrics import cohen_kappa_score

    if len(a) == 0 or len(a) != len(b):
        raise ValueError("kappa needs two ratings of the same, non-empty list of items")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined kappa (both raters constant) is nan, said above
        return float(cohen_kappa_score(a, b))


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
            rows.append({"type": t.name, "detector": d, "kappa": cohen_kappa(has, flagged),
                         "both": sum(x and y for x, y in zip(has, flagged))})
    return pd.DataFrame(rows, columns=["type", "detector", "kappa", "both"])
