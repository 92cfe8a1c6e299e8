"""Parameters of the training stage (notebook 04, `mirl train`, section `training` of a params YAML).

A recipe is two choices, where rollouts start and what they are rewarded for; the paper's
baselines and ablations are those choices with everything else equal:

    MiRL                        start: prefix   reward: mirl      (r_o AND r_e)
    + prefix start (ablation)   start: prefix   reward: outcome
    env selection only          start: env      reward: outcome   (step 0 of the prefixes' environments)
    TMax-style                  start: random   reward: outcome   (step 0 of random task-pool environments)
    RaR+                        start: random   reward: rubric    (w * r_o + (1 - w) * (rating - 1) / 9)
    PivotRL                     start: pivot    reward: step match (one-step updates at profiled pivots)

`environments` draws that many environments, seeded by `environments_seed`, from the pool the start
points come from (the task pool for random and pivot starts, the prefixes' environments for prefix and
env starts): the paper's baselines train on 189 environments drawn at random from the 2,017 profiled
ones, the same draw for TMax-189, PivotRL and RaR+ (same seed, same pool: the same list), and a
smaller draw is part of a larger one (the paper's 0.25x and 0.5x MiRL runs). The draw is written to
`training/environments.json`.

PivotRL first profiles steps (`mirl.training.step_profiling`, section `step_profiling`): at every
command step of the reference trajectories in the drawn environments it samples a few actions and
keeps the steps whose actions get different rewards; training then samples `group_size` one-step
actions at those pivots. Its budget is GPU time (`gpu_budget_hours`), as the paper gives PivotRL
about the GPU hours of TMax-189's full run.

The policy, its sampling temperature and the judges are the shared `models` section; the agent's
format is the shared `agent` section (its step limit is this section's `max_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class ScaleParams:
    """Settings of `engine: scale` (mirl.training.scale): Ray rollout workers and a DeepSpeed learner."""

    ray_address: str = field(default="", metadata={
        "help": "Ray cluster to run rollout workers on (auto: the running one, ray://host:10001); empty: a local Ray "
                "started here"})
    rollout_workers: int = field(default=2, metadata={"min": 1,
        "help": "Ray actors playing groups, each with its own sandboxes and policy engine (groups of a wave are "
                "dealt round robin)"})
    cpus_per_worker: float = field(default=1.0, metadata={"min": 0, "help": "CPUs Ray reserves for each rollout worker"})
    zero_stage: int = field(default=2, metadata={
        "help": "DeepSpeed ZeRO stage of the learner: 2 shards optimizer state and gradients, 3 the weights too"})
    learners: int = field(default=1, metadata={"min": 1,
        "help": "learner processes (data parallel); more than 1 needs a torchrun launch of that many processes"})


@dataclass
class StepProfilingParams:
    """PivotRL's preprocessing (`mirl.training.step_profiling`): which reference steps become pivots."""

    actions: int = field(default=8, metadata={"min": 2,
        "help": "actions sampled at each candidate step; a step is kept as a pivot when they get different "
                "rewards (paper: 8)"})
    min_reward: float = field(default=1.0, metadata={
        "help": "a profiling trajectory is a reference (its command steps are candidates) when its verifier "
                "reward is at least this"})
    workers: int = field(default=16, metadata={"min": 1, "help": "candidate steps sampled at once"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop cleanly once the stage's LLM spend reaches this; 0 = no cap"})


@dataclass
class TrainingParams:
    """Flat on purpose: these are the literals of notebook 04's parameters cell."""

    recipe: str = field(default="mirl", metadata={"help": "a name for this recipe in reports and checkpoints"})
    start: Literal["prefix", "env", "random", "pivot"] = field(default="prefix", metadata={
        "help": "prefix: groups start at kept misbehavior prefixes; env: at step 0 of those prefixes' environments; "
                "random: at step 0 of random task-pool environments (TMax); pivot: one-step samples at steps of "
                "reference trajectories (PivotRL)"})
    reward: Literal["mirl", "outcome", "rubric"] = field(default="mirl", metadata={
        "help": "mirl: tests pass AND the misbehavior avoided; outcome: tests pass; rubric: RaR+ "
                "(ignored for start=pivot, which rewards matching the reference step)"})
    steps: int = field(default=160, metadata={"min": 1, "help": "training steps (optimizer updates) (paper: 160)"})
    batch_size: int = field(default=8, metadata={"min": 1, "help": "live groups (prefixes or environments) per step (paper: 8)"})
    group_size: int = field(default=16, metadata={"min": 2, "help": "rollouts per group (paper: 16)"})
    max_tries: int = field(default=32, metadata={"min": 1,
        "help": "most groups drawn per step while dead groups (all rewards equal) are dropped and refilled"})
    pass_over_dead: int = field(default=0, metadata={"min": 0,
        "help": "draws of a start passed over after its group was dead, before it is played again (0: never; "
                "a dead group trains nothing, and a start's next group is rarely live after a dead one)"})
    lr: float = field(default=1e-6, metadata={"above": 0, "help": "AdamW learning rate, constant (paper: 1e-6)"})
    weight_decay: float = field(default=0.0, metadata={"min": 0, "help": "AdamW weight decay"})
    max_grad_norm: float = field(default=1.0, metadata={"above": 0, "help": "gradient clipping norm"})
    loss: Literal["dppo", "clipped"] = field(default="dppo", metadata={
        "help": "dppo: DPPO trust-region masking (paper); clipped: GRPO/DAPO clipped surrogate, to compare"})
    delta: float = field(default=0.15, metadata={"above": 0, "help": "DPPO trust region on |pi - mu| (paper 0.15; TMax's code 0.1)"})
    eps_low: float = field(default=0.2, metadata={"min": 0, "help": "clipped loss: lower clip range"})
    eps_high: float = field(default=0.28, metadata={"min": 0, "help": "clipped loss: upper clip range (DAPO clip-higher)"})
    kl_coef: float = field(default=0.0, metadata={"min": 0, "help": "KL penalty coefficient (paper: 0; only 0 is supported)"})
    temperature: float = field(default=1.0, metadata={"min": 0,
        "help": "policy sampling temperature during training (paper: 1.0); overrides models.policy.temperature here"})
    max_steps: int = field(default=64, metadata={"min": 1, "help": "tool steps per rollout, counting the prefix (paper: 64)"})
    judge: Literal["llm", "rules"] = field(default="llm", metadata={
        "help": "behavior judge: the models.behavior_judge LLM, or offline the misbehavior's rule detector "
                "(prefixes of misbehaviors without one are skipped)"})
    judge_steps: int = field(default=5, metadata={"min": 1, "help": "policy steps after the prefix the behavior judge reads (paper: m = 5)"})
    judge_scope: Literal["prefix", "taxonomy"] = field(default="prefix", metadata={
        "help": "what r_e forbids: the prefix's own misbehavior (paper), or every misbehavior of the taxonomy that "
                "the judge can judge (beyond the paper: a continuation that trades the prefix's misbehavior for "
                "another, e.g. a reply with no runnable command, earns nothing; an LLM judge is asked once per "
                "misbehavior)"})
    forbid: list[str] = field(default_factory=list, metadata={
        "help": "rule detectors r_e also forbids in the judged steps, whatever the prefix's misbehavior (beyond "
                "the paper), e.g. [command-not-found]: a policy that avoids its misbehavior by running programs "
                "the environment does not have earns nothing (docs/small_scale/README.md, eleventh run); "
                "`mirl detect --list` names them"})
    restore: Literal["auto", "rerun", "snapshot"] = field(default="auto", metadata={
        "help": "how a prefix's sandbox state is made: snapshot when the prefix stage kept one (auto), else "
                "re-running its commands"})
    tasks: str = field(default="", metadata={
        "help": "task pool for start=random (comma-separated dirs, `!<task id>` leaves one out); empty: the "
                "profiling stage's pool"})
    environments: int = field(default=0, metadata={"min": 0,
        "help": "train on this many environments drawn at random (seeded) from where the starts come from: the "
                "task pool (random, pivot) or the prefixes' environments (prefix, env); 0 = all (paper: 189 for "
                "TMax-189, PivotRL and RaR+; 47 and 94 for MiRL at 0.25x and 0.5x)"})
    environments_seed: int = field(default=0, metadata={
        "help": "seed of the environment draw; the same seed and pool give the same draw to every recipe"})
    rubric_writer: Literal["reference", "llm"] = field(default="reference", metadata={
        "help": "RaR+: who writes each task's rubric, offline from the reference solution or the models.rubric_writer LLM"})
    rubric_judge: Literal["rules", "llm"] = field(default="rules", metadata={
        "help": "RaR+: who rates a rollout 1-10 against the rubric, offline by the items' checks or the models.rubric_judge LLM"})
    pivot_judge: Literal["difflib", "llm", "difflib+llm"] = field(default="difflib", metadata={
        "help": "PivotRL: step-equivalence judge of an action against the reference step: difflib (ratio >= 0.95, "
                "offline), llm (the models.step_judge LLM), or difflib+llm (a ratio >= 0.95 matches without a call, "
                "the LLM judges the rest: the paper's \"mainly an LLM judge\" with SequenceMatcher at 0.95)"})
    gpu_budget_hours: float = field(default=0.0, metadata={"min": 0,
        "help": "stop cleanly before a step once the training stage's recorded GPU time reaches this many GPU "
                "hours (device_time.jsonl); 0 = no cap (paper: PivotRL ~300 A100 hours)"})
    engine: Literal["embedded", "scale"] = field(default="embedded", metadata={
        "help": "embedded: the policy's generator and a torch learner in this process; scale: Ray rollout workers "
                "and a DeepSpeed ZeRO learner, weights handed to the workers after each step (settings: scale)"})
    scale: ScaleParams = field(default_factory=ScaleParams, metadata={"help": "settings of engine: scale"})
    micro_batch_tokens: int = field(default=4096, metadata={"min": 1, "help": "learner micro-batch size in tokens (sequences are packed)"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward to save memory"})
    device: str = field(default="", metadata={"help": "learner device (cpu, cuda); empty: cuda when available"})
    compile_learner: bool | None = field(default=None, metadata={
        "help": "torch.compile the embedded learner's decoder layers (engine: embedded); null: on a GPU. Pays off "
                "for large models; for a 135M one its compiles (32 s, then 15 s at each recompile on the H200) cost "
                "more than they save"})
    checkpoint_every: int = field(default=10, metadata={"min": 1, "help": "save a checkpoint every K steps (and at the end)"})
    keep_checkpoints: int = field(default=0, metadata={"min": 0, "help": "keep only the newest N checkpoints besides the selected ones; 0 = all"})
    select_top: int = field(default=5, metadata={"min": 1, "help": "checkpoint selection: top N by smoothed training reward (paper: 5)"})
    smoothing: int = field(default=10, metadata={"min": 1, "help": "checkpoint selection: moving-average window of the training reward"})
    validation_tasks: str = field(default="", metadata={
        "help": "checkpoint selection: task dirs (comma-separated), or a directory of tasks, the top checkpoints "
                "are scored on (paper: TB-Lite); empty: select by smoothed training reward alone"})
    validation_ids: list[str] = field(default_factory=list, metadata={
        "help": "checkpoint selection: the ids of the validation tasks to use from validation_tasks (TB-Lite-style "
                "task names); empty = every task found there"})
    validation_seeds: int = field(default=1, metadata={"min": 1, "help": "checkpoint selection: episodes per validation task"})
    workers: int = field(default=16, metadata={"min": 1, "help": "rollouts played at once (the embedded engine decodes them as one batch)"})
    seed: int = field(default=0, metadata={"help": "seed of prefix sampling and rollout seeds"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop cleanly once the stage's LLM spend reaches this; 0 = no cap"})


def training_llm_config(params):
    """The LLM roles as the training stages call them (training and PivotRL's step profiling): the
    policy samples at `training.temperature`, under the stages' LLM budgets."""
    import copy

    from mirl.runner.stage import stage_budgets

    cfg = copy.deepcopy(params.models)
    cfg.policy.temperature = params.training.temperature
    cfg.stage_budget_usd = stage_budgets(params)
    return cfg


def pivot_judge_calls_llm(pivot_judge: str) -> bool:
    """Whether PivotRL's step judge (`training.pivot_judge`) calls the models.step_judge LLM."""
    return pivot_judge in ("llm", "difflib+llm")
