"""Stage 07, the cost report: the resource tables of one or more runs, cut up to the chosen
checkpoint, priced, compared with a reference (and with a paper's reported numbers).

It only reads what the other stages wrote and rewrites its outputs each time (nothing to resume,
no LLM calls), on the common runner: the stage lock, a params fingerprint, the summary. Written under `runs/<run>/cost/`:

    resources.csv    every resource row of every run (`mirl.cost.resources`), `counted` = inside the cut
    totals.csv       per run and phase, up to the cut: rollouts, tokens, calls, environments, GPU hours,
                     policy_usd, api_usd, total_usd
    stages.csv       the same per stage;  roles.csv  calls, tokens and USD per LLM role
    comparison.csv   the long frame of runs and reported recipes with % of the reference
    summary.json     the cut of each run, totals, the reference and where the money went
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirl.runner.layout import RECIPES, RunDir
from mirl.runner.stage import Item, Stage, StageError, run_stage

if TYPE_CHECKING:
    from mirl.params import Params

STAGE = "cost"


@dataclass
class CostReport:
    """What the notebook shows: frames of the runs (cut), the comparison, and where the money went."""

    resources: Any
    totals: Any
    stages: Any
    roles: Any
    comparison: Any
    cuts: dict[str, int | None]
    reference: str
    policy_price: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def device_hours(self):
        """Device hours inside the cut per run, stage and device (empty when none was recorded or declared)."""
        counted = self.resources[self.resources["counted"] & (self.resources["source"] == "device")]
        hours = counted.groupby(["run", "stage", "device"])["device_s"].sum() / 3600
        return hours.rename("device_hours").reset_index()


def price_table(params: Params) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """models.prices with cost.prices over it, and the currency rates the same way."""
    prices = {**params.models.prices, **params.cost.prices}
    rates = {**params.models.currency_rates, **params.cost.currency_rates}
    return prices, rates


def policy_price(params: Params, prices: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The price entry the policy is billed at (by name, or by the last part of a litellm name)."""
    for name in (params.cost.policy_price, params.models.policy.model):
        if not name:
            continue
        for key in (name, name.rsplit("/", 1)[-1]):
            if key in prices:
                return dict(prices[key])
    return None


def run_names(params: Params, here: RunDir) -> list[str]:
    """The runs to account for, as names under the runs root: `cost.runs`, else this run and each
    training recipe's run under it (`mirl.recipes`). A recipe's shared stages are links, so its totals
    hold their rollouts and wall time beside its training; their LLM calls and device time are in the
    run's own ledger and stay in the run's totals. Each run is labelled by its last path part."""
    return list(params.cost.runs) or [here.name, *(f"{here.name}/{RECIPES}/{r}" for r in here.recipes())]


def default_reference(params: Params, here: RunDir, labels: list[str]) -> str:
    """`cost.reference` (a run's name under the runs root or its label), else the first training
    recipe (the runs are compared by what training cost), else the first run."""
    ref = params.cost.reference
    if ref:
        return Path(ref).name if Path(ref).name in labels else ref
    recipes = [r for r in here.recipes() if r in labels] if not params.cost.runs else []
    return recipes[0] if recipes else labels[0]


def report(params: Params, run_dir: str | Path) -> CostReport:
    import pandas as pd

    from mirl.cost import compare
    from mirl.cost import totals as tot
    from mirl.cost.resources import resources
    from mirl.reported import read_costs, reported_frame
    from mirl.typed import ParamsError

    c = params.cost
    here = RunDir(run_dir)
    names = run_names(params, here)
    prices, rates = price_table(params)
    pprice = policy_price(params, prices)
    labels = [Path(n).name for n in names]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ParamsError(f"cost.runs: runs {', '.join(twice)} would share a label (the last part of a run's name)")
    frames, cuts, notes = [], {}, []
    for name, label in zip(names, labels):
        root = here.root.parent / name
        if not root.is_dir():
            raise ParamsError(f"cost.runs: no run {name!r} (looked for {root})")
        df = resources(root, prices, rates, c.hardware)
        if df.empty:
            notes.append(f"{name}: nothing recorded yet")
        step = c.up_to_steps.get(label, c.up_to_steps.get(name))
        cuts[label] = step if step is not None else tot.checkpoint_step(root, c.up_to)
        counted = tot.up_to(df, cuts[label])
        df["counted"] = df.index.isin(counted.index)
        frames.append(df)
    all_rows = pd.concat(frames, ignore_index=True)
    cut = all_rows[all_rows["counted"]]
    priced = tot.price(tot.totals(cut, ("run", "phase")), pprice, c.policy_rule, rates)
    stages = tot.price(tot.totals(cut, ("run", "phase", "stage")), pprice, c.policy_rule, rates)
    roles = tot.by_role(cut, priced)
    long = compare.run_frame(cut, priced, c.phases)
    if c.paper_reference:
        long = pd.concat([long, reported_frame(read_costs(c.paper_reference))], ignore_index=True)
    reference = default_reference(params, here, labels)
    if reference in labels and reference not in set(long["recipe"]):  # a run that recorded nothing yet
        notes.append(f"no resource is a share of {reference}: nothing of it is counted (nothing recorded yet, "
                     f"or nothing up to its cut)")
        comparison = long.assign(reference=reference, reference_value=float("nan"), percent=float("nan"))
    else:
        comparison = compare.relative(long, reference)
    if pprice is None:
        notes.append(f"the policy is unpriced: no entry {c.policy_price or params.models.policy.model!r} in the "
                     f"prices (cost.prices, models.prices)")
    notes += tot.where_the_money_went(stages, roles)
    return CostReport(all_rows, priced, stages, roles, comparison, cuts, reference, pprice, notes)


class CostStage(Stage):
    """The cost report on the common runner (lock, params fingerprint, summary): one item, the report,
    built afresh on every run (`redo`), since it is a view of the runs as they are now."""

    name = STAGE
    records = "report.jsonl"
    key_fields = ("report",)
    derived = ("resources.csv", "totals.csv", "stages.csv", "roles.csv", "comparison.csv")

    def __init__(self, params: Params, run_dir: str | Path):
        super().__init__(params, run_dir)
        self.result: CostReport | None = None

    def fingerprint(self) -> dict[str, Any]:
        m = self.params.models
        return {"cost": asdict(self.params.cost), "prices": dict(m.prices or {}),
                "currency_rates": dict(getattr(m, "currency_rates", None) or {}), "policy": m.policy.model}

    def plan(self) -> list[Item]:
        """The report is built here, where the runner reads a stage's inputs: a bad `cost.runs` or price
        table raises before any stored file changes (unless --force, which clears them first)."""
        self.result = report(self.params, self.run.root)
        return [Item(("all",), None)]

    def redo(self, record: dict[str, Any]) -> bool:
        return True

    def run_item(self, payload: Any) -> dict[str, Any]:
        r = self.result
        for name, frame in zip(self.derived, (r.resources, r.totals, r.stages, r.roles, r.comparison)):
            frame.to_csv(self.out / name, index=False)
        per_run = r.totals.groupby("run")[["rollouts", "policy_input_tokens", "policy_output_tokens", "api_usd",
                                            "total_usd", "gpu_hours"]].sum(min_count=1)
        r.summary = {"runs": list(r.cuts), "up_to_step": r.cuts, "reference": r.reference,
                     "policy_price": r.policy_price, "rule": self.params.cost.policy_rule,
                     "totals": {k: {c: (None if v != v else float(v)) for c, v in row.items()}
                                for k, row in per_run.to_dict("index").items()},
                     "notes": r.notes}
        self.result = r
        return {"report": "all", **r.summary}

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {k: v for r in records for k, v in r.items() if k != "report"}


def run_cost(params: Params, run_dir: str | Path, force: bool = False) -> CostReport:
    """Build the cost report of `params.cost.runs` (or this run), write it under runs/<run>/cost/ and
    return it (its `summary` is what summary.json holds)."""
    stage = CostStage(params, run_dir)
    summary = run_stage(stage, force=force, progress=False)
    if not summary["complete"]:
        raise StageError(f"cost: the report could not be written ({summary.get('stopped') or 'see the log'})")
    stage.result.summary = summary
    return stage.result
