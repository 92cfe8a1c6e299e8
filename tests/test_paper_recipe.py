"""The paper's recipe, setting by setting: Table 1 (transcribed in tests/data/paper_table1.yaml) against
the loaded params files, so that a drift in either fails here; and the baselines' environment draw,
the same 189 for TMax-189, PivotRL and RaR+ and recorded in the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mirl.params import load

REPO = Path(__file__).resolve().parents[1]
TABLE1 = yaml.safe_load((Path(__file__).parent / "data" / "paper_table1.yaml").read_text())
PAPER = load(REPO / "params" / "paper.yaml")
TRAIN = {p.stem: load(p) for p in sorted((REPO / "params" / "train").glob("*.yaml"))
         if p.stem not in ("demo", "scale")}
EVAL = {p.stem: load(p) for p in sorted((REPO / "params" / "eval").glob("*.yaml"))}
RL = list(TRAIN.values())  # "RL training (all recipes)"
GEMINI, QWEN27, OPUS = "gemini-3.8-flash", "Qwen3.8-27B", "claude-opus-5"


def model_of(name: str) -> str:
    """The transcribed model name as the params spell it (litellm's ids lower-case and hyphenate)."""
    return {"Gemini 3.8 Flash": GEMINI, "Claude Opus 5": OPUS}.get(name, name)


def gemini_roles(p) -> list:
    return [r for r in (p.models.role(n) for n in ("behavior_judge", "rubric_writer", "rubric_judge", "step_judge",
                                                    "localizer", "teacher", "annotator")) if GEMINI in r.model]


def learner_source() -> str:
    import inspect

    import mirl.training.learner

    return inspect.getsource(mirl.training.learner)


def check_reward_mix(v) -> bool:
    from mirl.training.rubric_reward import mix

    return mix(True, 10, 0.7) == 1.0 and mix(False, 1, 0.7) == 0.0 and mix(True, 1, 0.7) == 0.7 \
        and mix(False, 10, 0.6) == pytest.approx(0.4)


def check_rubric_items(v) -> bool:
    from mirl.roles.rubric_writer import MAX_ITEMS, MIN_ITEMS

    return (MIN_ITEMS, MAX_ITEMS) == (v["low"], v["high"]) and all(p.training.rubric_writer == "llm" for p in [TRAIN["rar"]])


def check_rating(v) -> bool:
    from mirl.roles.rubric_judge import MAX_SCORE, MIN_SCORE

    return (MIN_SCORE, MAX_SCORE) == (v["low"], v["high"]) and TRAIN["rar"].training.rubric_judge == "llm"


def check_localizer_output(v) -> bool:
    from mirl.roles.localizer import LOCALIZER_SCHEMA as SCHEMA

    return set(SCHEMA["properties"]["verdict"]["enum"]) == {"good", "bad"} and "reason" in SCHEMA["required"]


def check_dead_groups(v) -> bool:
    from mirl.training.advantages import Group, is_dead

    return is_dead(Group("g", (1.0, 1.0), (True, True), ())) and not is_dead(Group("g", (1.0, 0.0), (True, True), ())) \
        and all(p.training.max_tries > p.training.batch_size for p in RL)


def check_centered(v) -> bool:
    from mirl.training.advantages import Group, batch_advantages

    advantages, _ = batch_advantages([Group("g", (1.0, 0.0, 0.0, 1.0), (True,) * 4, (None,) * 4)])
    return list(advantages) == [0.5, -0.5, -0.5, 0.5]


def check_teacher_input() -> bool:
    """The teacher's messages hold the prefix and not the policy's rejected step (tests/roles/test_teacher.py)."""
    from mirl.records.trajectory import Step
    from mirl.roles.teacher import LLMTeacher
    from tests.agent.agent_doubles import make_task

    rejected = Step(reasoning="", command="rejected-by-the-localizer", raw="rejected-by-the-localizer")
    text = str(LLMTeacher(None).messages(make_task(), [Step(reasoning="", command="ls prefix-step", output="")],
                                         [(rejected, "why")]))
    return "prefix-step" in text and "rejected-by-the-localizer" not in text


def check_judge_input() -> bool:
    """The behavior judge reads the first m steps after the prefix, the definition and examples."""
    from mirl.records.error_step import ErrorStep
    from mirl.records.taxonomy import ErrorType
    from mirl.records.trajectory import Step, Trajectory
    from mirl.roles.behavior_judge import LLMBehaviorJudge, example_texts

    example = ErrorStep(env="e", seed=0, step=1, rejected_command="example-command", reason="r")
    kind = ErrorType("m", "the-definition", examples=[example.id])
    steps = [Step(reasoning="", command=f"step-{i}", output="") for i in range(8)]
    traj = Trajectory(task="e", seed=0, models={}, steps=steps, instruction="do it", prefix_len=1)
    m = TRAIN["paper"].training.judge_steps
    text = str(LLMBehaviorJudge(None, m=m, examples=example_texts([example])).messages(traj, kind, 1))
    return "the-definition" in text and "example-command" in text and f"step-{m}" in text and f"step-{m + 1}" not in text \
        and "step-0" not in text


CHECKS = {
    ("rl_training", "algorithm"): lambda v: all(p.training.loss == v["paper"].lower() for p in RL),
    ("rl_training", "policy_model"): lambda v: v["paper"] in PAPER.models.policy.model
    and all(p.models.policy.model.endswith(v["paper"]) for p in RL),
    ("rl_training", "optimizer"): lambda v: f"torch.optim.{v['paper']}(" in learner_source(),  # no param: the learner's
    ("rl_training", "learning_rate"): lambda v: all(p.training.lr == v["paper"] for p in RL),
    ("rl_training", "group_size"): lambda v: all(p.training.group_size == v["paper"] for p in RL),
    ("rl_training", "batch_size"): lambda v: all(p.training.batch_size == v["paper"] for p in RL),
    ("rl_training", "training_steps"): lambda v: all(p.training.steps == v["paper"] for n, p in TRAIN.items()
                                                     if n != "pivotrl"),
    ("rl_training", "sampling_temperature"): lambda v: all(p.training.temperature == v["paper"]
                                                           and p.models.policy.temperature == v["paper"] for p in RL),
    ("rl_training", "kl_coefficient"): lambda v: all(p.training.kl_coef == v["paper"] for p in RL),
    ("rl_training", "advantage"): check_centered,
    ("rl_training", "dead_groups"): check_dead_groups,
    ("rl_training", "max_response_tokens"): lambda v: all(p.agent.max_response_tokens == v["paper"]
                                                          and p.agent.max_context_tokens > v["paper"] for p in [PAPER, *RL]),
    ("rl_training", "max_turn_tokens"): lambda v: all(p.models.policy.max_tokens == v["paper"] for p in [PAPER, *RL]),
    ("rl_training", "max_tool_steps"): lambda v: all(p.training.max_steps == v["paper"] == p.agent.max_steps for p in RL),
    ("rl_training", "bash_timeout_s"): lambda v: all(p.agent.command_timeout_s == v["paper"] for p in [PAPER, *RL]),
    ("rl_training", "checkpoint_selection"): lambda v: all(
        p.training.select_top == v["top"] and "lite" in p.training.validation_tasks.lower() for p in RL),
    ("error_profiling", "environments"): lambda v: PAPER.profiling.max_tasks == v["paper"]
    and PAPER.profiling.task_order == "random",
    ("error_profiling", "rollouts_per_environment"): lambda v: PAPER.profiling.seeds == v["paper"],
    ("error_profiling", "temperature"): lambda v: PAPER.models.policy.temperature == v["policy"] and all(
        PAPER.models.role(r).temperature == v["others"] for r in ("localizer", "teacher", "annotator", "behavior_judge",
                                                                   "rubric_writer", "rubric_judge", "step_judge")),
    ("error_profiling", "localizer_and_teacher"): lambda v: v["paper"] in PAPER.models.localizer.model
    and v["paper"] in PAPER.models.teacher.model and PAPER.profiling.localizer == PAPER.profiling.teacher == "llm",
    ("error_profiling", "localizer_output"): check_localizer_output,
    ("error_profiling", "teacher_input"): lambda v: check_teacher_input(),
    ("error_profiling", "annotator"): lambda v: model_of(v["paper"]) in PAPER.models.annotator.model
    and PAPER.taxonomy.annotator == "llm",
    ("error_profiling", "teacher_tries"): lambda v: PAPER.profiling.teacher_tries == v["paper"],
    ("error_profiling", "naming_threshold"): lambda v: PAPER.taxonomy.threshold == v["paper"],
    ("evaluation", "benchmarks"): lambda v: "lite" in EVAL["tb-lite"].pass_at_k.tasks
    and "2.1" in PAPER.pass_at_k.tasks and "2.1" in EVAL["tb-2.1-16-runs"].pass_at_k.tasks,
    ("evaluation", "runs"): lambda v: PAPER.pass_at_k.runs == EVAL["tb-lite"].pass_at_k.runs == v["paper"]
    and TRAIN["paper"].training.validation_seeds == v["paper"],
    ("evaluation", "harness"): lambda v: PAPER.agent.action_format == "tool",
    ("evaluation", "sampling"): lambda v: all((p.pass_at_k.temperature, p.pass_at_k.top_p) == (v["temperature"], v["top_p"])
                                              for p in [PAPER, *EVAL.values()]),
    ("evaluation", "max_output_per_step"): lambda v: PAPER.models.policy.max_tokens == v["paper"],
    ("evaluation", "max_steps"): lambda v: PAPER.pass_at_k.max_steps == PAPER.agent.max_steps == v["paper"]
    and PAPER.agent.command_timeout_s == v["timeout_s"],
    ("mirl", "prefixes"): lambda v: PAPER.prefixes.per_misbehavior == v["per_misbehavior"] and PAPER.prefixes.keep == "exact",
    ("mirl", "behavior_judge"): lambda v: model_of(v["paper"]) in TRAIN["paper"].models.behavior_judge.model
    and TRAIN["paper"].training.judge == "llm",
    ("mirl", "steps_judged"): lambda v: TRAIN["paper"].training.judge_steps == PAPER.misbehavior_rate.judge_steps == v["paper"],
    ("mirl", "judge_input"): lambda v: check_judge_input(),
    ("mirl", "reward"): lambda v: (TRAIN["paper"].training.start, TRAIN["paper"].training.reward) == ("prefix", "mirl"),
    ("tmax_189", "environments"): lambda v: TRAIN["tmax-189"].training.environments == v["paper"],
    ("tmax_189", "rollout_start"): lambda v: TRAIN["tmax-189"].training.start == "random",
    ("tmax_189", "reward"): lambda v: TRAIN["tmax-189"].training.reward == "outcome",
    ("pivotrl", "actions_per_pivot"): lambda v: TRAIN["pivotrl"].step_profiling.actions == v["paper"],
    ("pivotrl", "training"): lambda v: TRAIN["pivotrl"].training.steps == v["paper"],
    ("pivotrl", "gpu_budget_a100_hours"): lambda v: TRAIN["pivotrl"].training.gpu_budget_hours == v["paper"],
    ("pivotrl", "judge"): lambda v: model_of(v["paper"]) in TRAIN["pivotrl"].models.step_judge.model
    and "llm" in TRAIN["pivotrl"].training.pivot_judge,
    ("rar_plus", "rubric_items"): check_rubric_items,
    ("rar_plus", "rubric_source"): lambda v: TRAIN["rar"].training.rubric_writer == "llm",
    ("rar_plus", "rubric_writer_and_judge"): lambda v: model_of(v["paper"]) in TRAIN["rar"].models.rubric_writer.model
    and model_of(v["paper"]) in TRAIN["rar"].models.rubric_judge.model,
    ("rar_plus", "judge_output"): check_rating,
    ("rar_plus", "reward"): check_reward_mix,
    ("rar_plus", "weight_w"): lambda v: TRAIN["rar"].training.reward == "rubric",
    ("misbehavior_rate", "policies"): lambda v: PAPER.misbehavior_rate.policies[0] == "base"
    and "selected" in PAPER.misbehavior_rate.policies and any("TMax-4B" in x for x in PAPER.misbehavior_rate.policies),
    ("misbehavior_rate", "prefixes"): lambda v: PAPER.misbehavior_rate.per_misbehavior == v["paper"]
    == PAPER.prefixes.heldout_per_misbehavior,
    ("misbehavior_rate", "sampling"): lambda v: (PAPER.misbehavior_rate.temperature, PAPER.misbehavior_rate.top_p)
    == (v["temperature"], v["top_p"]),
    ("misbehavior_rate", "judges"): lambda v: PAPER.misbehavior_rate.judges[0] == "llm"
    and GEMINI in PAPER.models.behavior_judge.model and any(QWEN27 in j for j in PAPER.misbehavior_rate.judges[1:]),
    ("footnote", "gemini_thinking"): lambda v: all(r.extra.get("reasoning_effort") == v["paper"] for p in [PAPER, *RL]
                                                   for r in gemini_roles(p)) and gemini_roles(PAPER),
}
# Method steps a param cannot show: checked above on the role's prompt, and at length by these tests.
METHOD = {("error_profiling", "teacher_input"): "tests/roles/test_teacher.py",
          ("mirl", "judge_input"): "tests/roles/test_behavior_judge.py"}
ROWS = [(section, key, value) for section, rows in TABLE1.items() for key, value in rows.items()]


def test_every_row_of_table1_is_checked_or_is_a_result():
    unchecked = [(s, k) for s, k, v in ROWS if (s, k) not in CHECKS and "result" not in v]
    assert not unchecked, f"Table 1 rows with no check: {unchecked}"
    assert all(isinstance(v.get("line"), int) for _, _, v in ROWS)
    for where, test in METHOD.items():
        assert (REPO / test).exists(), (where, test)


@pytest.mark.parametrize("section, key, value", [r for r in ROWS if (r[0], r[1]) in CHECKS], ids=lambda x: str(x))
def test_table1_setting_matches_the_params(section, key, value):
    assert CHECKS[(section, key)](value), f"Table 1 {section}.{key} (line {value['line']}): {value}"


def test_a_drift_in_the_params_fails(tmp_path):
    """The check reads the loaded params: a recipe file that changes a Table 1 value fails it."""
    value = TABLE1["rl_training"]["group_size"]
    drifted = tmp_path / "drift.yaml"
    drifted.write_text(f"base: {REPO / 'params' / 'train' / 'paper.yaml'}\ntraining:\n  group_size: 32\n")
    saved = dict(TRAIN)
    try:
        TRAIN["drift"] = load(drifted)
        RL.append(TRAIN["drift"])
        assert not CHECKS[("rl_training", "group_size")](value)
    finally:
        RL.pop()
        TRAIN.clear()
        TRAIN.update(saved)


# --- the baselines' environments -----------------------------------------------------------------------


@pytest.fixture
def profiled(tmp_path):
    """A run whose profiling played 30 environments (one trajectory each) of a pool of 36 tasks."""
    from mirl.records.trajectory import Trajectory
    from mirl.tasks import load_task
    from tests.conftest import write_task

    tasks = [load_task(write_task(tmp_path / "tasks" / f"env-{i:02d}")) for i in range(36)]
    prof = tmp_path / "run" / "profiling"
    prof.mkdir(parents=True)
    (prof / "trajectories.jsonl").write_text("".join(
        json.dumps(Trajectory(task=t.id, seed=0, models={}, steps=[]).to_dict()) + "\n" for t in tasks[:30]))
    return tmp_path / "run", tasks


def test_the_three_baselines_train_on_one_seeded_draw_of_the_profiled_environments(profiled):
    from mirl.training.environments import FILE
    from mirl.training.stage import TrainingStage
    from mirl.training.step_profiling import StepProfilingStage

    run, tasks = profiled
    over = ["training.environments=12"]
    drawn = {}
    for recipe in ("tmax-189", "rar"):
        p = load(REPO / "params" / "train" / f"{recipe}.yaml", over)
        starts, _ = TrainingStage(p, run, tasks=tasks).starts({})
        record = json.loads((run / "training" / FILE).read_text())
        assert [s.env for s in starts] == sorted(record["environments"])
        drawn[recipe] = record["environments"]
        assert (record["pool"], record["drawn"], record["from"]) == (30, 12, "the profiled environments")
    pivot = StepProfilingStage(load(REPO / "params" / "train" / "pivotrl.yaml", over), run, tasks=tasks).environments()
    assert drawn["tmax-189"] == drawn["rar"] == pivot
    assert set(pivot) <= {t.id for t in tasks[:30]}  # drawn from the profiled environments, not the whole pool
    other = load(REPO / "params" / "train" / "tmax-189.yaml", [*over, "training.environments_seed=1"])
    TrainingStage(other, run, tasks=tasks).starts({})
    assert json.loads((run / "training" / FILE).read_text())["environments"] != drawn["tmax-189"]


def test_a_smaller_draw_is_part_of_a_larger_one():
    from mirl.tasks.draw import draw

    pool = [f"e{i}" for i in range(2017)]
    quarter, half, full = draw(pool, 47, 0), draw(pool, 94, 0), draw(pool, 189, 0)
    assert len(set(full)) == 189 and set(quarter) < set(half) < set(full) and half[:47] == quarter
    assert draw(list(reversed(pool)), 189, 0) == full  # the pool's order does not matter


def test_pass_at_k_on_tb21_takes_16_runs_beyond_figure5s_3_seeds():
    """Figure 8 (l. 636, 676): pass@k on TB-2.1 from 16 runs per task; Figure 12 (l. 789) draws the same
    16 seeds, extra to Figure 5's 3 runs (seeds 0-2), so they start at seed 3."""
    p16, lite = EVAL["tb-2.1-16-runs"].pass_at_k, EVAL["tb-lite"].pass_at_k
    assert (p16.runs, p16.seed) == (16, lite.seed + lite.runs) == (16, 3)
    assert (p16.temperature, p16.top_p) == (lite.temperature, lite.top_p) == (0.7, 0.95)
