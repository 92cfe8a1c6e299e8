"""Agreement between judges on the same continuations, as Cohen's kappa: the two LLM judges of the
paper, and the rule detectors for the misbehaviors they cover.

kappa = (p_o - p_e) / (1 - p_e), with p_o the share of items the two raters label alike and p_e the
share expected by chance from each rater's own label frequencies.

The one degenerate case is p_e = 1, which happens only when both raters give every item the same
single label; then p_o = 1 too and the formula is 0/0. Kappa is NaN there (as scikit-learn's), the
kit's one convention: kappa measures agreement beyond chance, and where chance explains all of it
there is nothing to measure. A 1.0 would rank two judges that never fire (or a taxonomy type and a
rule detector that both flag nothing) as perfectly matched; the raw agreement reported beside kappa
already says they never disagree. Two raters that are each constant but on different labels have
p_o = p_e = 0 and kappa 0, no special case.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from itertools import combinations
from typing import Any

import pandas as pd

from mirl.evaluate.stats.tables import samples_frame

ITEM = ["policy", "misbehavior", "prefix_id", "sample"]


def cohens_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters' labels on the same items (any hashable labels); NaN when both raters
    give every item one and the same label (see the module's docstring)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"cohens_kappa: {len(a)} labels from one rater but {len(b)} from the other")
    if not a:
        raise ValueError("cohens_kappa: no items (agreement needs at least one item both raters labelled)")
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    freq_a = pd.Series(a).value_counts() / n
    freq_b = pd.Series(b).value_counts() / n
    expected = float((freq_a * freq_b.reindex(freq_a.index, fill_value=0.0)).sum())
    if expected == 1.0:
        return math.nan
    return (observed - expected) / (1.0 - expected)


def judge_agreement(samples: Iterable[Any], by: Sequence[str] = ("misbehavior",)) -> pd.DataFrame:
    """Kappa for every pair of judges, per group of `by`, on the continuations both judged.

    A continuation is (policy, misbehavior, prefix_id, sample); items where either judge failed
    (repeated None) are left out and counted in n_excluded. Pairs with no item in common (a rule
    detector that does not cover this misbehavior) are not listed.
    """
    df = samples_frame(samples, need_sample=True)
    by = list(by)
    unknown = [c for c in by if c not in ITEM]
    if unknown:
        raise ValueError(f"by={unknown}: groups must be among {ITEM}")
    duplicated = df.duplicated([*ITEM, "judge"])
    if duplicated.any():
        first = df[duplicated].iloc[0]
        raise ValueError(f"sample {int(first.name)}: judge {first['judge']!r} labelled continuation "
                         f"{tuple(first[ITEM])} more than once")
    rows = []
    for key, group in (df.groupby(by, sort=True, dropna=False) if by else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        labels = {judge: dict(zip(map(tuple, rows_[ITEM].to_numpy()), rows_["repeated"]))
                  for judge, rows_ in group.groupby("judge", sort=True, dropna=False)}
        for ja, jb in combinations(sorted(labels), 2):
            shared = [item for item in labels[ja] if item in labels[jb]]
            if not shared:
                continue
            pairs = [(labels[ja][i], labels[jb][i]) for i in shared]
            judged = [(x, y) for x, y in pairs if x is not None and y is not None]
            row = dict(zip(by, key), judge_a=ja, judge_b=jb, n_items=len(judged),
                       n_excluded=len(pairs) - len(judged))
            if judged:
                a, b = zip(*judged)
                row.update(agreement=sum(x == y for x, y in judged) / len(judged), kappa=cohens_kappa(a, b))
            else:
                row.update(agreement=math.nan, kappa=math.nan)
            rows.append(row)
    return pd.DataFrame(rows, columns=[*by, "judge_a", "judge_b", "n_items", "n_excluded", "agreement", "kappa"])
