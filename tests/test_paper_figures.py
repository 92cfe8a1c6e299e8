"""What the notebooks save beside the paper's numbers, and what they say when there is nothing to draw."""

from __future__ import annotations

import pandas as pd

from mirl import paper_figures, reported

PAPER = reported.read()


def rates(*policies: tuple[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{"policy": p, "misbehavior": m, "judge": "rules", "n_prefixes": 2, "n_samples": 8,
                          "n_failed": 0, "rate": r, "se": 0.1, "ci_low": 0.0, "ci_high": 1.0}
                         for p, r in policies for m in ("m1", "m2")])


def test_reductions_are_saved_against_the_first_policy_or_the_reason_given(tmp_path):
    red = paper_figures.save_reductions(rates(("base", 0.5), ("mirl", 0.25)), {"base": "B", "mirl": "M"}, PAPER,
                                        tmp_path)
    assert set(red["reduction"].round(6)) == {0.5} and (tmp_path / "misbehavior_reduction.png").exists()
    assert len(pd.read_csv(tmp_path / "misbehavior_reductions.csv")) == len(red)
    alone = paper_figures.save_reductions(rates(("base", 0.5)), {"base": "B"}, PAPER, tmp_path / "alone")
    assert alone.startswith("one policy") and not (tmp_path / "alone" / "misbehavior_reduction.png").exists()


def test_a_figure_the_file_leaves_out_is_named_with_its_reason(tmp_path):
    mine = {k: v for k, v in PAPER.items() if k not in ("figure4", "table2")}
    mine["not_transcribed"] = {"figure4": "not in my paper", "table2": "nor this"}
    said = paper_figures.save_taxonomy_beside(pd.DataFrame(), pd.DataFrame(), mine, tmp_path)
    assert said == "figure4: not drawn from the paper: not in my paper\ntable2: not drawn from the paper: nor this"
    assert not list(tmp_path.iterdir())
