"""The evaluation a plan makes, sized before it runs: how many held-out prefixes and samples the
misbehavior-rate stage will judge, and the smallest relative reduction that design detects
(`mirl.evaluate.stats.power`), from the base policy's per-prefix rates of an earlier run.

The design is stratified by misbehavior, as the analysis is (the mean rate over misbehaviors,
`mirl.evaluate.stats.power.stratified_detectable`): each misbehavior counts the prefixes the stage will
take of it (what the run's prefix stage holds out when it has run, else the earlier run's, else
`per_misbehavior` for each misbehavior the earlier run judged) and its own base rates from the earlier
run (all of them pooled where it has fewer than two). Without an earlier run the rates are a stated
prior (`PRIOR`: the spread seen in a one-GPU run of SmolLM2, where 32 of 33 held-out prefixes gave mixed
outcomes over 16 samples), and the line says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mirl.evaluate.stats.power import design_line, stratified_detectable
from mirl.typed import ParamsError

PRIOR = tuple(np.linspace(0.25, 0.95, 33).round(3))
TARGET = 0.4  # the reduction a run is sized to see (the paper reports 43-57%)


@dataclass(frozen=True)
class Design:
    planned: dict[str, int]   # misbehavior -> held-out prefixes the stage takes of it
    samples: int              # continuations per prefix
    rates: dict[str, tuple[float, ...]]  # misbehavior -> the per-prefix base rates its stratum is sized from
    base_rates: tuple[float, ...]        # every per-prefix base rate known (or the prior)
    source: str               # where the rates (and the misbehavior count) came from

    @property
    def prefixes(self) -> int:
        return sum(self.planned.values())

    @property
    def detectable(self) -> float:
        return stratified_detectable(self.rates, self.samples, self.planned)

    def line(self, target: float = TARGET) -> str:
        return f"{design_line(self.rates, self.samples, self.planned, target)} (base rates: {self.source})"


def base_rates(run_dir: str | Path) -> tuple[dict[str, float], dict[str, str]]:
    """The base policy's rate per held-out prefix in a run's misbehavior-rate judgments (the first
    policy the stage compared, by its first judge: the design counts one judgment a sample), and each
    prefix's misbehavior; prefixes with no valid judgment are left out; empty when the run has none."""
    import pandas as pd

    path = Path(run_dir) / "misbehavior_rate" / "judgments.csv"
    if not path.exists():
        return {}, {}
    rows = pd.read_csv(path)
    if rows.empty:
        return {}, {}
    missing = {"policy", "judge", "prefix_id", "misbehavior", "repeated"} - set(rows.columns)
    if missing:
        raise ParamsError(f"{path}: not the misbehavior-rate stage's judgments (no column {', '.join(sorted(missing))})")
    first = _first_policy(Path(run_dir)) or rows["policy"].iloc[0]  # the stage's reference, not the first row's
    base = rows[(rows["policy"] == first) & (rows["judge"] == rows["judge"].iloc[0])]
    rates = base.groupby("prefix_id")["repeated"].mean().dropna()
    kinds = base.groupby("prefix_id")["misbehavior"].first().loc[rates.index]
    return {str(k): float(v) for k, v in rates.items()}, {str(k): str(v) for k, v in kinds.items()}


def _first_policy(run_dir: Path) -> str | None:
    """The first policy of the rate stage's summary (its reference); None before it has one."""
    import json

    try:
        policies = json.loads((run_dir / "misbehavior_rate" / "summary.json").read_text()).get("policies") or {}
    except (OSError, ValueError):
        return None
    return next(iter(policies), None)


def _planned_prefixes(run_dir: Path, per_misbehavior: int) -> dict[str, int] | None:
    """Misbehavior -> the held-out prefixes the stage will take of it from the run's prefix stage (None:
    not run yet)."""
    from collections import Counter

    from mirl.jsonl import read_jsonl

    path = run_dir / "prefixes" / "heldout.jsonl"
    if not path.exists():
        return None
    counts = Counter(str(r.get("misbehavior")) for r in read_jsonl(path)[0])
    return {m: min(n, per_misbehavior) for m, n in sorted(counts.items())}


def plan_design(params, run_dir: str | Path, rates_from: str | Path | None = None) -> Design:
    """The design of `params.misbehavior_rate` for the run in `run_dir`, rates from `rates_from` (a run
    directory), else from this run, else `PRIOR`."""
    s = params.misbehavior_rate
    rates, kinds, source = {}, {}, "a prior spread of 0.25-0.95 (no earlier run measured)"
    unusable = []
    for where in [p for p in (rates_from, run_dir) if p]:
        rates, kinds = base_rates(where)
        if len(rates) >= 2:
            source = f"{len(rates)} prefixes of {where}"
            break
        if where == rates_from:  # asked for and not usable: say so rather than fall back in silence
            unusable = [f"{where} has {len(rates)} held-out prefix(es) with a valid judgment of the base policy"]
        rates, kinds = {}, {}
    if unusable:
        source = (f"{source}; {unusable[0]}" if rates else f"a prior spread of 0.25-0.95 ({unusable[0]})")
    planned = _planned_prefixes(Path(run_dir), s.per_misbehavior)
    if planned is None and rates_from:  # before the prefix stage: what the earlier run held out
        planned = _planned_prefixes(Path(rates_from), s.per_misbehavior)
        if planned is not None:
            source += f"; held-out prefixes as many as {rates_from} kept"
    if planned is None:  # nor that: as many misbehaviors as the earlier run judged
        planned = {m: s.per_misbehavior for m in sorted(set(kinds.values()))}
        if not planned:
            planned = {"": s.per_misbehavior}
            source += "; misbehaviors not known yet, counted as 1"
    pooled = tuple(rates.values()) if rates else PRIOR
    own: dict[str, list[float]] = {}
    for prefix, rate in rates.items():
        own.setdefault(kinds[prefix], []).append(rate)
    strata = {m: tuple(own[m]) if len(own.get(m, ())) >= 2 else pooled for m in planned}
    borrowed = [m for m in planned if planned[m] and rates and strata[m] is pooled]
    if borrowed:
        source += f"; {len(borrowed)} misbehavior(s) with fewer than 2 rates of their own sized from all of them"
    return Design(planned=planned, samples=s.samples, rates=strata, base_rates=pooled, source=source)
