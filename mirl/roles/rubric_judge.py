"""The rubric judge of the RaR+ baseline: rate a rollout from 1 to 10 against its task's rubric.

It reads the task, the rubric (each item's kind, weight and text) and the agent's own steps after
the prefix, as commands, exit codes and outputs only (the rubric is checkable from those; an
agent's claims in its reasoning earn nothing). The rating enters the reward as
`(rating - 1) / 9` (`mirl.training.rubric_reward`).

Two judges behind one interface: an LLM (`LLMRubricJudge`, role "rubric_judge", which thinks
briefly and ends with `<score>N</score>`, N an integer from 1 to 10, re-asked when the tag is
missing), and offline `RuleRubricJudge`, which decides each item by its `check` regex.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mirl.records.trajectory import Step, Trajectory
from mirl.roles.prompts import MAX_OUTPUT_CHARS
from mirl.roles.rubric_writer import Rubric, parse_check
from mirl.roles.tagreply import TagError, ask_tagged, before_tag, last_tag

ROLE = "rubric_judge"
MIN_SCORE, MAX_SCORE = 1, 10
STEP_OUTPUT_CHARS = MAX_OUTPUT_CHARS // 2  # a long rollout must still fit the judge's context

JUDGE_SYSTEM = """You grade the work of an agent that solved a task in a Linux terminal, one shell \
command at a time. You see the task, a rubric and every command the agent ran with its exit code and \
output, in order.

Rubric items are Essential, Important or Optional qualities, each with a positive weight, and \
Pitfalls: mistakes with a negative weight, which count against the work when they happen. Decide each item from the commands and outputs \
alone; an item the steps do not show is not met. Rate the work as a whole from 1 (nothing of value, \
or harmful) to 10 (every Essential and Important item met, no Pitfall), weighing items by their \
weights. Do not reward length: more steps or longer output earn nothing by themselves.

Think briefly (at most 150 words), then end your reply with the rating as
<score>N</score>
where N is an integer from 1 to 10, and nothing after it."""

JUDGE_USER = """## Task
{instruction}

## Rubric
{rubric}

## The agent's {n} step(s)
{steps}"""

REASK = ("Your previous reply could not be used: {error}. Reply again: think briefly, then end with "
         "<score>N</score>, N an integer from 1 to 10.")


@dataclass
class Rating:
    score: float  # 1..10 (an integer from the LLM; the rule judge's may fall between)
    source: str  # "llm:<model>" | "rules:rubric"
    steps: list[int] = field(default_factory=list)  # trajectory indices of the steps rated
    reason: str = ""  # the LLM's thinking, or which items the rules found
    met: dict[int, bool] = field(default_factory=dict)  # rule judge: item index -> met (a Pitfall: happened)


class RubricJudge(Protocol):
    def rate(self, trajectory: Trajectory, rubric: Rubric, prefix_steps: int = 0) -> Rating: ...


def rated_steps(trajectory: Trajectory, prefix_steps: int = 0) -> list[int]:
    """Indices of the policy's own steps from `prefix_steps` on (teacher or restored steps are not its work)."""
    return [i for i in range(max(0, prefix_steps), len(trajectory.steps)) if trajectory.steps[i].source == "policy"]


def parse_score(text: str) -> int:
    """The integer in the LAST score tag, 1..10; TagError otherwise."""
    raw = last_tag(text, "score")
    try:
        value = float(raw)
    except ValueError:
        raise TagError(f"the last score tag holds {raw[:40]!r}, not a number") from None
    if not MIN_SCORE <= value <= MAX_SCORE or value != int(value):
        raise TagError(f"the score {raw[:40]!r} is not an integer from {MIN_SCORE} to {MAX_SCORE}")
    return int(value)


def render_rubric(rubric: Rubric) -> str:
    return "\n".join(f"{k}. [{item.kind}, weight {item.weight:g}] {item.text}" for k, item in enumerate(rubric.items, 1))


def render_step(number: int, step: Step) -> str:
    out = step.output
    if len(out) > STEP_OUTPUT_CHARS:
        out = out[: STEP_OUTPUT_CHARS // 2] + "\n[...]\n" + out[-STEP_OUTPUT_CHARS // 2:]
    if step.command is None:
        return f"### Step {number}\n(no runnable command)\nOutput:\n{out}\n"
    return f"### Step {number}\n```bash\n{step.command}\n```\nExit code: {step.exit_code}\nOutput:\n{out}\n"


class LLMRubricJudge:
    """The judge as an LLM role through the client; a reply without a usable score tag is re-asked,
    at most `tries` asks in all, then raised as `LLMError(kind="invalid_json")` (`mirl.roles.tagreply`)."""

    def __init__(self, client: Any, role: str = ROLE, tries: int | None = None):
        self.client, self.role, self.tries = client, role, tries

    def messages(self, trajectory: Trajectory, rubric: Rubric, prefix_steps: int = 0) -> list[dict[str, str]]:
        idx = rated_steps(trajectory, prefix_steps)
        steps = "\n".join(render_step(k, trajectory.steps[i]) for k, i in enumerate(idx, 1)) or "(no steps)"
        user = JUDGE_USER.format(instruction=trajectory.instruction.strip(), rubric=render_rubric(rubric),
                                 n=len(idx), steps=steps)
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

    def rate(self, trajectory: Trajectory, rubric: Rubric, prefix_steps: int = 0, sample_index: int = 0) -> Rating:
        score, text = ask_tagged(self.client, self.role, self.messages(trajectory, rubric, prefix_steps), parse_score,
                                 REASK, tries=self.tries, sample_index=sample_index)
        model = self.client.config.role(self.role).model
        return Rating(score=float(score), source=f"llm:{model}", steps=rated_steps(trajectory, prefix_steps),
                      reason=before_tag(text, "score"))


class RuleRubricJudge:
    """Offline: an item is met when its check matches one rated step's command (or output).

    rating = 1 + 9 * clip((met weight + the (negative) weights of Pitfalls that happened) / total non-Pitfall
    weight, 0, 1),
    over the items that carry a check; items without one are left out (only an LLM can read them).
    A rubric with no checkable non-Pitfall item cannot be rated this way: a ValueError says so.
    """

    def rate(self, trajectory: Trajectory, rubric: Rubric, prefix_steps: int = 0) -> Rating:
        idx = rated_steps(trajectory, prefix_steps)
        steps = [trajectory.steps[i] for i in idx]
        met: dict[int, bool] = {}
        for k, item in enumerate(rubric.items):
            check = parse_check(item.check)
            if check is None:
                continue
            place, regex = check
            texts = [s.command for s in steps if s.command is not None] if place == "command" else [s.output for s in steps]
            met[k] = any(regex.search(t) for t in texts)
        total = sum(rubric.items[k].weight for k in met if rubric.items[k].kind != "Pitfall")
        if total <= 0:
            raise ValueError(f"rubric of task {rubric.task!r} has no checkable Essential, Important or Optional item; "
                             "the rule judge cannot rate against it")
        gained = sum(rubric.items[k].weight for k, ok in met.items() if ok and rubric.items[k].kind != "Pitfall")
        lost = sum(rubric.items[k].weight for k, ok in met.items() if ok and rubric.items[k].kind == "Pitfall")
        fraction = min(1.0, max(0.0, (gained + lost) / total))  # a Pitfall's weight is negative
        found = [f"{'hit' if rubric.items[k].kind == 'Pitfall' else 'met'}: {rubric.items[k].text}"
                 for k, ok in met.items() if ok]
        return Rating(score=MIN_SCORE + (MAX_SCORE - MIN_SCORE) * fraction, source="rules:rubric", steps=idx,
                      reason="; ".join(found) or "no item met", met=met)
