"""The profiling overview as a reader sees it."""

from __future__ import annotations

import pandas as pd

from mirl.profiling.report import profile_figure
from tests.test_reported import assert_readable


def test_first_flagged_steps_sit_on_whole_step_indices_even_all_at_step_0():
    env = pd.DataFrame({"env": ["a", "b"], "flag_rate": [1.0, 0.5]})
    detectors = pd.Series([26, 4], index=["rules:no-runnable-command", "rules:retry-unchanged-after-failure"])
    spend = pd.DataFrame({"role": ["policy"], "cost_usd": [0.0], "input_tokens": [31000],
                          "cached_input_tokens": [22000], "output_tokens": [2300]})
    fig = profile_figure(env, pd.Series([0] * 12), detectors, spend)
    assert_readable(fig)
    ax = fig.axes[1]
    low, high = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if low <= t <= high]
    assert shown == [0, 1, 2, 3] and [p.get_width() for p in ax.patches] == [0.8]  # one bar, at step 0
