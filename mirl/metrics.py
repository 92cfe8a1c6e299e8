"""The evaluation metrics by their common names (`mirl.metrics.pass_at_k`, ...); they live in
`mirl.evaluation`, plain functions over records."""

from mirl.evaluation.agreement import cohens_kappa
from mirl.evaluation.passk import pass_at_k, pass_at_k_table
from mirl.evaluation.rates import misbehavior_rates
from mirl.evaluation.scores import leaderboard_score, paired_difference, run_scores

__all__ = ["cohens_kappa", "leaderboard_score", "misbehavior_rates", "paired_difference", "pass_at_k",
           "pass_at_k_table", "run_scores"]
