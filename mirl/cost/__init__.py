"""Cost and resource accounting (stage 07): what every stage used, priced, compared across recipes.

- `resources`: the resource table of a run, from the LLM ledger, trajectories, training metrics,
  summaries and device time;
- `policy`: the paper's pricing of policy tokens (`policy_cost_usd`) and its rollout estimate;
- `totals`: cuts up to a checkpoint, sums per phase/stage/role, prices;
- `compare`, `plots`: shares of a reference recipe (Figure 9), recipes side by side (Figure 10), beside
  a paper's reported numbers (`mirl.reported.read_costs`); `arithmetic`: the paper's own cost arithmetic;
- `stage`: the cost stage and its report; `report`: the tables and figures notebook 07 shows.
The device-time ledger stages write is `mirl.runner.devices`.
"""

from mirl.cost.policy import estimate_rollouts, policy_cost_usd

__all__ = ["estimate_rollouts", "policy_cost_usd"]
