"""One look for every figure a run publishes, and one way to save them (PNG for the page, PDF for print).

`apply()` sets seaborn's whitegrid theme with the kit's palette and sizes; `mirl.notebook.run_dirs`
calls it, so every stage notebook's figures share it without a line of their own. `save(fig, dir,
name)` writes `name.png` and `name.pdf` side by side; `reports/<run>/index.html` shows the PNG and
links the PDF.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PALETTE = ["#3b6ea8", "#d9822b", "#4f9a61", "#b8474e", "#7d64a8", "#8c6d55", "#c772b0", "#7f7f7f"]
DPI = 120
RC: dict[str, Any] = {
    "figure.dpi": DPI, "savefig.dpi": DPI, "savefig.bbox": "tight", "figure.autolayout": False,
    "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9, "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
    "pdf.fonttype": 42,  # embed TrueType: text in the PDFs stays text
}
_applied = False


def apply() -> None:
    """Set the style (idempotent); matplotlib stays headless-safe (Agg unless a backend was chosen)."""
    global _applied
    import matplotlib
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE, rc=RC)
    matplotlib.rcParams.update(RC)
    _applied = True


def applied() -> bool:
    return _applied


def save(fig, directory: str | Path, name: str) -> list[Path]:
    """Write `name`.png and `name`.pdf under `directory`; returns both paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.png", directory / f"{name}.pdf"]
    for path in paths:
        fig.savefig(path, bbox_inches="tight", **({"dpi": DPI} if path.suffix == ".png" else {}))
    return paths
