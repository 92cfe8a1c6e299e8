"""What a training run will take, before it starts: rollouts, policy tokens, judge calls, and the
API fees of the judges where their prices are known.

Rollouts follow the paper's estimate S * B * G / (1 - d): steps, groups per step, group size, and
the share d of dead groups that are drawn and dropped (TMax-4B's 0.325 unless the run has measured
its own). Policy tokens are an upper bound (every rollout using all its tool steps at the reply
cap); judge calls are one per rollout for an LLM judge, none for a rule judge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mirl.training.params import pivot_judge_calls_llm

if TYPE_CHECKING:
    from mirl.params import Params

TMAX_DEAD_SHARE = 0.325


def estimate(params: Params, dead_share: float | None = None) -> dict[str, Any]:
    t, models = params.training, params.models
    d = TMAX_DEAD_SHARE if dead_share is None else float(dead_share)
    group = t.group_size
    rollouts = t.steps * t.batch_size * group / (1 - min(d, 0.99))
    rollouts = min(rollouts, t.steps * t.max_tries * group)  # the cap on tries bounds it
    reply = models.policy.max_tokens or 0
    steps = 1 if t.start == "pivot" else t.max_steps
    judge_role = {"mirl": "behavior_judge" if t.judge == "llm" else None,
                  "rubric": "rubric_judge" if t.rubric_judge == "llm" else None}.get(t.reward)
    if t.start == "pivot":
        judge_role = "step_judge" if pivot_judge_calls_llm(t.pivot_judge) else None
    out: dict[str, Any] = {"recipe": t.recipe, "steps": t.steps, "dead_share_assumed": d,
                           "rollouts": int(round(rollouts)),
                           "policy_output_tokens_max": int(round(rollouts * steps * reply)),
                           "judge": judge_role or ("none" if t.reward == "outcome" and t.start != "pivot" else "rules"),
                           "judge_calls": int(round(rollouts)) if judge_role else 0}
    if judge_role:
        from mirl.llm.pricing import cost_usd

        rc = models.role(judge_role)
        prompt, answer = 3000, min(rc.max_tokens or 512, 512)  # a judge prompt of ~5 steps, a short answer
        per_call, price = cost_usd(rc.model, prompt, 0, answer, models.prices, models.currency_rates)
        out["judge_model"] = rc.model
        out["judge_usd_estimate"] = round(per_call * out["judge_calls"], 2) if price != "none" else None
    return out
