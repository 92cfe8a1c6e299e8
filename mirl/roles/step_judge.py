"""The step-equivalence judge of the PivotRL baseline: does a sampled action match the reference step?

At a pivot (a step of a reference trajectory) the policy samples actions; one is rewarded when it
does what the reference step does. Two judges behind one interface `same(context_steps,
reference_step, action) -> bool`:

- `LLMStepJudge` (role "step_judge"): sees the steps before the pivot, the reference step and the
  sampled action, thinks briefly and ends with `<answer>yes</answer>` or `<answer>no</answer>`
  (re-asked when the tag is missing);
- `DifflibStepJudge` (offline): the two commands, whitespace-normalized, match when their
  `difflib.SequenceMatcher` ratio is at least `threshold` (0.95); its junk heuristic is off, since
  it would skip frequent characters of commands over 200 characters (heredocs) and lower the ratio;
- `MatchThenLLMStepJudge`: a ratio of at least 0.95 matches without a call, the LLM judges the rest
  (the paper rewards PivotRL's actions "mainly with an LLM judge" and matches steps with
  SequenceMatcher at 0.95).

An action without a runnable command never matches.
"""

from __future__ import annotations

import difflib
from typing import Any, Protocol

from mirl.detectors.shell import normalize
from mirl.records.trajectory import Step
from mirl.roles.behavior_judge import parse_answer
from mirl.roles.prompts import render_history, render_proposed
from mirl.roles.tagreply import ask_tagged

ROLE = "step_judge"
THRESHOLD = 0.95

JUDGE_SYSTEM = """You compare two next steps of an agent working on a task in a Linux terminal. You \
see the steps taken so far with their outputs, a reference step known to be right at this point, and \
a candidate step. Answer "yes" when the candidate does the same thing as the reference: it would \
have the same effect on the files and processes and show the same information, even if it is \
written differently (other flags of the same meaning, quoting, order of independent parts). Answer \
"no" when it does something else, does only part of it, or does more that matters.

Think briefly (at most 80 words), then end your reply with exactly one of
<answer>yes</answer>
<answer>no</answer>
and nothing after it."""

JUDGE_USER = """## Steps so far
{history}

## Reference step
{reference}

## Candidate step
{candidate}"""

REASK = ("Your previous reply could not be used: {error}. Reply again: think briefly, then end with "
         "<answer>yes</answer> or <answer>no</answer>.")


class StepJudge(Protocol):
    def same(self, context_steps: list[Step], reference_step: Step, action: Step) -> bool: ...


class LLMStepJudge:
    """The judge as an LLM role; after `tries` asks without a usable tag, `LLMError(kind="invalid_json")`."""

    def __init__(self, client: Any, role: str = ROLE, tries: int | None = None):
        self.client, self.role, self.tries = client, role, tries

    def messages(self, context_steps: list[Step], reference_step: Step, action: Step) -> list[dict[str, str]]:
        user = JUDGE_USER.format(history=render_history(context_steps), reference=render_proposed(reference_step),
                                 candidate=render_proposed(action))
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

    def same(self, context_steps: list[Step], reference_step: Step, action: Step, sample_index: int = 0) -> bool:
        if action.command is None:
            return False
        yes, _ = ask_tagged(self.client, self.role, self.messages(context_steps, reference_step, action), parse_answer,
                            REASK, tries=self.tries, sample_index=sample_index)
        return yes


def command_ratio(a: str | None, b: str | None) -> float:
    """SequenceMatcher ratio of two commands after collapsing whitespace."""
    return difflib.SequenceMatcher(None, normalize(a), normalize(b), autojunk=False).ratio()


class DifflibStepJudge:
    """Offline: the commands match when their whitespace-normalized difflib ratio is >= `threshold`."""

    def __init__(self, threshold: float = THRESHOLD):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        self.threshold = threshold

    def same(self, context_steps: list[Step], reference_step: Step, action: Step) -> bool:
        if action.command is None or reference_step.command is None:
            return False
        return command_ratio(action.command, reference_step.command) >= self.threshold


class MatchThenLLMStepJudge:
    """A near-identical command (`DifflibStepJudge`) matches at once; any other is for `llm` to judge."""

    def __init__(self, llm: Any, threshold: float = THRESHOLD):
        self.llm, self.match = llm, DifflibStepJudge(threshold)

    def same(self, context_steps: list[Step], reference_step: Step, action: Step) -> bool:
        if action.command is None:
            return False
        return self.match.same(context_steps, reference_step, action) or self.llm.same(context_steps, reference_step, action)
