"""Figures of the cost report: shares of a reference recipe (Figure 9) and recipes side by side (Figure 10)."""

from __future__ import annotations

from mirl.cost.compare import PHASE_ORDER, recipe_totals
from mirl.reported import RESOURCES

LABELS = {"rollouts": "Rollouts", "input_tokens": "Input tokens", "output_tokens": "Output tokens",
          "environments": "Environments", "gpu_hours": "GPU hours", "api_usd": "API fee", "total_usd": "Total cost"}

PHASE_COLORS = {"preprocessing": "#4C72B0", "rl": "#DD8452", "evaluation": "#55A868", "other": "#8172B3",
                "total": "#937860"}


def _phases(frame) -> list[str]:
    return sorted(frame["phase"].unique(), key=lambda p: PHASE_ORDER.index(p) if p in PHASE_ORDER else 99)


def relative_figure(rel, title: str = ""):
    """One row of bars per resource, one bar per recipe, stacked by phase, in % of the reference."""
    import matplotlib.pyplot as plt

    resources = [r for r in RESOURCES if r in set(rel["resource"])]
    recipes = list(dict.fromkeys(rel["recipe"]))
    phases = _phases(rel)
    height = 0.8 / max(1, len(recipes))
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(resources) * max(1, len(recipes))))
    longest = 0.0
    for j, recipe in enumerate(recipes):
        left = [0.0] * len(resources)
        ys = [i + j * height for i in range(len(resources))]
        for phase in phases:
            part = rel[(rel["recipe"] == recipe) & (rel["phase"] == phase)].set_index("resource")["percent"]
            widths = [float(part.get(r, 0.0)) if part.get(r, 0.0) == part.get(r, 0.0) else 0.0 for r in resources]
            ax.barh(ys, widths, height=height * 0.9, left=left, color=PHASE_COLORS.get(phase, "#999999"),
                    edgecolor="white", label=phase if j == 0 else None, alpha=1.0 - 0.25 * (j % 2))
            left = [a + b for a, b in zip(left, widths)]
        longest = max([longest, *left])
        for y, total, r in zip(ys, left, resources):
            ref_zero = rel[(rel["resource"] == r)]["reference_value"].fillna(0).iloc[0] <= 0
            text = "n/a (reference 0)" if ref_zero else f"{total:.0f}%"
            ax.text(total + 1, y, f"{recipe}: {text}", va="center", fontsize=7)
    ax.axvline(100, color="black", lw=0.8, ls="--")
    ax.set_xlim(0, max(100.0, longest) * 1.35)  # room for the "recipe: N%" labels inside the axes
    ax.set_yticks([i + height * (len(recipes) - 1) / 2 for i in range(len(resources))])
    ax.set_yticklabels([LABELS.get(r, r) for r in resources])
    ax.invert_yaxis()
    ref = rel["reference"].iloc[0] if len(rel) else ""
    ax.set_xlabel(f"% of {ref}")
    ax.set_title(title or f"Resources relative to {ref}")
    ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def human(v: float) -> str:
    """A resource amount as a reader says it: 133.1K, 10.5B, 737, 0.25."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= size * 0.9995:  # 999.7 is "1K", not "1e+03"
            return f"{v / size:.3g}{unit}"
    return f"{v:.3g}"


def side_by_side_figure(long, title: str = ""):
    """A panel per resource; a bar per recipe, stacked by phase, in the resource's own unit."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    resources = [r for r in RESOURCES if r in set(long["resource"])]
    recipes = list(dict.fromkeys(long["recipe"]))
    phases = _phases(long)
    cols = min(4, len(resources)) or 1
    rows = (len(resources) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    totals = recipe_totals(long)
    for ax, r in zip(axes.flat, resources):
        bottom = [0.0] * len(recipes)
        for phase in phases:
            part = long[(long["resource"] == r) & (long["phase"] == phase)].set_index("recipe")["value"]
            heights = [float(part.get(x, 0.0)) if part.get(x, 0.0) == part.get(x, 0.0) else 0.0 for x in recipes]
            ax.bar(range(len(recipes)), heights, bottom=bottom, color=PHASE_COLORS.get(phase, "#999999"),
                   label=phase)
            bottom = [a + b for a, b in zip(bottom, heights)]
        for i, x in enumerate(recipes):
            v = totals.loc[x].get(r) if r in totals.columns else None
            reported = "source" in long.columns and set(long.loc[long["recipe"] == x, "source"]) == {"paper"}
            missing = "not printed" if reported else "unpriced"  # a paper's recipe without the number, or a run without a price
            ax.text(i, bottom[i], missing if v is None or v != v else human(v), ha="center", va="bottom",
                    fontsize=7)
        ax.set_ylim(0, max([*bottom, 1e-9]) * 1.2)  # headroom: the values written on the bars stay under the title
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: human(y)))
        ax.set_xticks(range(len(recipes)))
        ax.set_xticklabels(recipes, fontsize=7 if len(recipes) <= 4 else 6,
                           rotation=0 if len(recipes) <= 4 else 90)
        ax.set_title(LABELS.get(r, r), fontsize=9)
    for ax in list(axes.flat)[len(resources):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(title or "Recipes side by side")
    fig.tight_layout()
    if len(resources) % cols:  # the legend in the empty cell at the end
        axes.flat[-1].legend(handles, labels, title="phase", loc="center", fontsize=8)
    else:
        fig.legend(handles, labels, title="phase", loc="upper right", fontsize=8)
        fig.subplots_adjust(top=0.86)
    return fig
