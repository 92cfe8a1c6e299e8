"""What notebook 07 shows of a cost report: its tables with the columns a reader compares, the runs'
figures, and the paper's Figures 9 and 10 with its own arithmetic redone, each saved under the report
directory (PNG + PDF, CSV). The notebook only calls these and displays what they return."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from mirl import plotstyle
from mirl.cost import plots
from mirl.cost.compare import relative, side_by_side

TOTAL_COLUMNS = ["run", "phase", "rollouts", "steps_per_rollout", "policy_input_tokens", "policy_cached_input_tokens",
                 "policy_output_tokens", "llm_calls", "environments", "gpu_hours", "wall_hours", "sandbox_hours",
                 "policy_usd", "api_usd", "total_usd"]
STAGE_COLUMNS = ["run", "phase", "stage", "rollouts", "policy_input_tokens", "policy_output_tokens", "llm_calls",
                 "gpu_hours", "wall_hours", "policy_usd", "api_usd", "total_usd"]


def totals_table(rep: Any, report_dir: str | Path) -> pd.DataFrame:
    """Per run and phase, the resources and money (`cost_totals.csv`)."""
    table = rep.totals[TOTAL_COLUMNS]
    table.to_csv(Path(report_dir) / "cost_totals.csv", index=False)
    return table


def stages_table(rep: Any) -> pd.DataFrame:
    """Per run, phase and stage: where the resources went."""
    return rep.stages[STAGE_COLUMNS]


def run_rows(rep: Any) -> pd.DataFrame:
    """The comparison rows of the runs (not of reported recipes)."""
    return rep.comparison[rep.comparison["source"] == "run"]


def save_relative(rep: Any, report_dir: str | Path) -> None:
    """Each resource as a share of the reference (`cost_relative`): the runs alone when the reference is
    one of them, else beside the reported recipe they are compared with."""
    runs = run_rows(rep)
    frame = runs if rep.reference in set(runs["recipe"]) else rep.comparison
    plotstyle.save(plots.relative_figure(frame), report_dir, "cost_relative")


def save_side_by_side(rep: Any, report_dir: str | Path) -> pd.DataFrame | str:
    """The runs' resources side by side (`cost_side_by_side`); the table, or why there is none."""
    runs = run_rows(rep)
    if runs.empty:
        return "the runs recorded nothing yet"
    plotstyle.save(plots.side_by_side_figure(runs), report_dir, "cost_side_by_side")
    return side_by_side(runs)


def save_paper_costs(rep: Any, params: Any, report_dir: str | Path) -> pd.DataFrame | str:
    """The paper's cost figures redrawn (`cost_paper_relative`: Figure 9, `cost_paper_side_by_side`: Figure 10),
    the runs overlaid on its recipes (`cost_overlay`), and its arithmetic redone from its printed inputs
    (`cost_paper_arithmetic.csv`, returned) when the file is the paper's and the policy has a price; else
    what was drawn, or why nothing was."""
    from mirl import reported
    from mirl.cost.arithmetic import paper_arithmetic
    from mirl.llm.pricing import usd_price

    source = params.cost.paper_reference
    if not source:
        return "cost.paper_reference is empty: no reported costs to draw"
    paper = reported.read_costs(source)
    report_dir = Path(report_dir)
    ref = paper.get("reference") or next(iter(paper["recipes"]))
    plotstyle.save(plots.relative_figure(relative(reported.figure_frame(paper, "figure9"), ref),
                                         title=f"Paper, Figure 9: resources relative to {ref}"),
                   report_dir, "cost_paper_relative")
    plotstyle.save(plots.side_by_side_figure(reported.figure_frame(paper, "figure10"),
                                             title="Paper, Figure 10: the four recipes on 189 environments"),
                   report_dir, "cost_paper_side_by_side")
    overlay = pd.concat([run_rows(rep), reported.reported_frame(paper)], ignore_index=True)
    plotstyle.save(plots.relative_figure(relative(overlay, ref), title=f"Runs and the paper's recipes, relative to {ref}"),
                   report_dir, "cost_overlay")
    if "figures" not in paper or not rep.policy_price:
        return f"{source}: drawn (Figures 9, 10 and the overlay); its arithmetic needs the paper's file and a policy price"
    rates = {**params.models.currency_rates, **params.cost.currency_rates}
    numbers = reported.read(source)
    arithmetic = pd.DataFrame(paper_arithmetic(numbers, usd_price("policy", rep.policy_price, rates)))
    arithmetic.to_csv(report_dir / "cost_paper_arithmetic.csv", index=False)
    return arithmetic


def prices(params: Any) -> pd.DataFrame | dict:
    """The price table the report used, beside the paper's Table 4 when the reference file is the paper's."""
    from mirl import paper_figures, reported
    from mirl.cost.stage import price_table

    table = price_table(params)[0]
    source = params.cost.paper_reference
    if source and "figures" in reported.read_costs(source):
        return paper_figures.prices_beside(table, reported.read(source))
    return table
