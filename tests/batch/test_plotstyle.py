"""Every stage notebook's first cell (`run_dirs`) applies the one report style; figures save as PNG and PDF."""

from __future__ import annotations

import matplotlib
import matplotlib.colors

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from mirl import plotstyle  # noqa: E402
from mirl.notebook import run_dirs  # noqa: E402


def test_run_dirs_applies_the_style_and_save_writes_png_and_pdf(tmp_path):
    matplotlib.rcdefaults()
    assert matplotlib.colors.to_hex(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][0]) != plotstyle.PALETTE[0]
    _, reports = run_dirs({"run_name": "r", "runs_root": str(tmp_path / "runs"), "reports_root": str(tmp_path / "rep")})
    assert reports == tmp_path / "rep" / "r" and reports.is_dir()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    assert [matplotlib.colors.to_hex(c) for c in colors] == plotstyle.PALETTE
    assert matplotlib.rcParams["axes.spines.top"] is False and matplotlib.rcParams["pdf.fonttype"] == 42
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png, pdf = plotstyle.save(fig, reports, "line")
    plt.close(fig)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
    assert (png.name, pdf.name) == ("line.png", "line.pdf")
