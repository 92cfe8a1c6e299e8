"""Cost and resource accounting (stage 07): what every stage used, priced, compared across recipes.

- `resources`: the resource table of a run, from the LLM ledger, trajectories, training metrics,
  summaries and device time;
- `devices`: the device-time recorder a stage calls (`record_device_time`);
- `policy`: the paper's pricing of policy tokens (`policy_cost_usd`) and its rollout estimate;
- `totals`: cuts up to a checkpoint, sums per phase/stage/role, prices;
- `compare`, `paper`, `plots`: shares of a reference recipe (Figure 9), recipes side by side
  (Figure 10), a paper's reported numbers;  `stage`: notebook 07's report.
"""

from mirl.cost.policy import estimate_rollouts, policy_cost_usd

__all__ = ["estimate_rollouts", "policy_cost_usd"]
