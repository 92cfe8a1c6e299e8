"""The behavior judge: did a rollout from a misbehavior prefix repeat that misbehavior?

It reads the task, the misbehavior (name, definition, examples) and the first `m` policy steps after
the prefix (reasoning, command, output, in order), and answers yes (the failure mode happened in at
least one of them) or no. Only that bit reaches the policy's reward (`mirl.training.rewards`).

Two judges behind one interface: an LLM (`LLMBehaviorJudge`, role "behavior_judge", which thinks
briefly and ends with `<answer>yes</answer>` or `<answer>no</answer>`), and offline the rule
detector of that misbehavior (`RuleBehaviorJudge`) where one exists. `judge_for` picks one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.prompts import MAX_OUTPUT_CHARS

ROLE = "behavior_judge"
M = 5  # policy steps after the prefix that the judge reads

JUDGE_SYSTEM = """You check whether an agent working on a task in a Linux terminal showed one \
specific failure mode. The agent was put into a situation where it had made this mistake before; \
you see the task, the failure mode (its name, definition and examples of it), and the next few \
steps the agent took on its own, each with its reasoning, its command and that command's output, \
in order.

Answer "yes" when the failure mode, as the definition states it, happened in at least one of \
these steps; answer "no" when it happened in none of them. Judge only this failure mode: other \
mistakes, slowness or an approach you would not take do not count. The definition also says what \
the failure mode is not; respect that.

Think briefly (at most 100 words), then end your reply with exactly one of
<answer>yes</answer>
<answer>no</answer>
and nothing after it."""

JUDGE_USER = """## Task
{instruction}

## Failure mode: {name}
{definition}

### Examples of it
{examples}

## The agent's next {n} step(s)
{steps}"""

REASK = ("Your previous reply could not be used: {error}. Reply again: think briefly, then end with "
         "<answer>yes</answer> or <answer>no</answer>.")

_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


class AnswerError(ValueError):
    """A judge reply without a usable final answer tag; the message says what was wrong."""


@dataclass
class Judgment:
    yes: bool  # the misbehavior happened in one of the judged steps
    source: str  # "llm:<model>" or "rules:<detector>"
    steps: list[int] = field(default_factory=list)  # trajectory indices of the steps judged
    reason: str = ""  # the LLM's thinking, or the detector's evidence
    flagged: list[int] = field(default_factory=list)  # rule judge: the judged steps the detector flagged


class BehaviorJudge(Protocol):
    m: int

    def judge(self, trajectory: Trajectory, misbehavior: ErrorType, prefix_steps: int | None = None) -> Judgment: ...


def judged_steps(trajectory: Trajectory, prefix_steps: int | None = None, m: int = M) -> list[int]:
    """Indices of the first `m` policy steps after the prefix (teacher or restored steps are not the policy's)."""
    start = trajectory.prefix_len if prefix_steps is None else prefix_steps
    return [i for i in range(start, len(trajectory.steps)) if trajectory.steps[i].source == "policy"][:m]


def parse_answer(text: str) -> bool:
    """True for yes, False for no, from the LAST answer tag of the reply; anything else (a reply cut inside
    its last tag included) raises AnswerError."""
    from mirl.roles.tagreply import unfinished_tag

    tags = _TAG.findall(text or "")
    if unfinished_tag(text, "answer"):
        raise AnswerError("the reply ends inside an unfinished <answer> tag (cut off, e.g. at the token limit)")
    if not tags:
        raise AnswerError("the reply has no <answer>yes</answer> or <answer>no</answer> tag")
    last = tags[-1].strip().lower()
    if last not in ("yes", "no"):
        raise AnswerError(f"the last answer tag holds {tags[-1].strip()[:40]!r}, not yes or no")
    return last == "yes"


def example_texts(steps: list[ErrorStep]) -> dict[str, str]:
    """Error-step id -> a line the judge can read (a taxonomy type's examples are error-step ids)."""
    out = {}
    for s in steps:
        cmd = s.rejected_command if s.rejected_command is not None else "(no runnable command)"
        cmd = cmd if len(cmd) <= 300 else cmd[:300] + " [cut]"
        out[s.id] = f"command: {cmd}\nwhy it was wrong: {s.reason}" + (f"\nwhat it does: {s.description}"
                                                                       if s.description else "")
    return out


def render_examples(misbehavior: ErrorType, texts: Mapping[str, str] | None) -> str:
    shown = [texts[e] for e in misbehavior.examples if texts and e in texts]
    if not shown:
        return "(none given)"
    return "\n\n".join(f"{k}. {t}" for k, t in enumerate(shown, 1))


def render_step(number: int, step: Step) -> str:
    out = step.output
    if len(out) > MAX_OUTPUT_CHARS:
        out = out[: MAX_OUTPUT_CHARS // 2] + "\n[...]\n" + out[-MAX_OUTPUT_CHARS // 2:]
    reasoning = step.reasoning.strip() or "(none)"
    command = f"```bash\n{step.command}\n```" if step.command is not None else "(no runnable command)"
    exit_line = f"Exit code: {step.exit_code}\n" if step.command is not None else ""
    return f"### Step {number}\nReasoning: {reasoning}\nCommand:\n{command}\n{exit_line}Output:\n{out}\n"


class LLMBehaviorJudge:
    """The judge as an LLM role through the client; a reply without a usable tag is re-asked, at most
    `tries` asks in all (the client's `json_tries` by default), then recorded in the ledger and raised
    as `LLMError(kind="invalid_json")`, as for an invalid JSON reply."""

    def __init__(self, client: Any, m: int = M, examples: Mapping[str, str] | None = None, role: str = ROLE,
                 tries: int | None = None):
        self.client, self.m, self.examples, self.role, self.tries = client, m, examples, role, tries

    def messages(self, trajectory: Trajectory, misbehavior: ErrorType, prefix_steps: int | None = None
                 ) -> list[dict[str, str]]:
        idx = judged_steps(trajectory, prefix_steps, self.m)
        steps = "\n".join(render_step(k, trajectory.steps[i]) for k, i in enumerate(idx, 1)) or "(no steps)"
        user = JUDGE_USER.format(instruction=trajectory.instruction.strip(), name=misbehavior.name,
                                 definition=misbehavior.definition.strip(),
                                 examples=render_examples(misbehavior, self.examples), n=len(idx), steps=steps)
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

    def judge(self, trajectory: Trajectory, misbehavior: ErrorType, prefix_steps: int | None = None,
              sample_index: int = 0) -> Judgment:
        from mirl.llm.errors import LLMError

        idx = judged_steps(trajectory, prefix_steps, self.m)
        convo = self.messages(trajectory, misbehavior, prefix_steps)
        tries = max(1, self.tries or self.client.config.json_tries)
        model = self.client.config.role(self.role).model
        error = ""
        for _ in range(tries):
            [c] = self.client.complete(self.role, convo, n=1, sample_offset=sample_index)
            try:
                yes = parse_answer(c.text)
            except AnswerError as e:
                error = str(e)
                convo = convo + [{"role": "assistant", "content": c.text},
                                 {"role": "user", "content": REASK.format(error=error)}]
                continue
            thinking = _TAG.split(c.text)[0].strip()
            return Judgment(yes=yes, source=f"llm:{model}", steps=idx, reason=thinking)
        msg = f"no answer tag after {tries} ask(s): {error}"
        self.client.ledger.record(role=self.role, stage=self.client.stage, model=model, n=0, tries=tries,
                                  error=f"invalid_json: {msg}")
        raise LLMError("invalid_json", msg, role=self.role, model=model, tries=tries)


def rule_detector_of(misbehavior: ErrorType, mapping: Mapping[str, str] | None = None) -> str | None:
    """The detector that defines a misbehavior: from `mapping` (type name -> detector), else from a
    provenance naming one (`rules: rules:<detector>` as the offline annotator writes it, or `rules: <detector>`)."""
    if mapping and misbehavior.name in mapping:
        return mapping[misbehavior.name].removeprefix("rules:").strip()
    prov = misbehavior.provenance.strip()
    if not prov.startswith("rules:"):
        return None
    name = prov.removeprefix("rules:").strip().removeprefix("rules:").strip()
    name = name.split(";", 1)[0].strip()  # curation appends its history ("; renamed from 'x'")
    return name or None


def has_rule_detector(misbehavior: ErrorType, mapping: Mapping[str, str] | None = None) -> bool:
    """Whether a misbehavior names a rule detector that exists (a provenance naming an unknown one has none)."""
    from mirl.detectors.catalog import DETECTORS

    return rule_detector_of(misbehavior, mapping) in DETECTORS


class RuleBehaviorJudge:
    """Offline: the misbehavior's rule detector, run over the whole trajectory (its rules look back at
    earlier steps), says yes when it flags one of the first `m` policy steps after the prefix."""

    def __init__(self, m: int = M, mapping: Mapping[str, str] | None = None):
        self.m, self.mapping = m, dict(mapping or {})

    def judge(self, trajectory: Trajectory, misbehavior: ErrorType, prefix_steps: int | None = None) -> Judgment:
        from mirl.detectors import get_detectors

        name = rule_detector_of(misbehavior, self.mapping)
        if name is None:
            raise ValueError(f"misbehavior {misbehavior.name!r} has no rule detector (provenance "
                             f"{misbehavior.provenance!r}); map it to one or use the LLM judge")
        [det] = get_detectors([name])
        idx = judged_steps(trajectory, prefix_steps, self.m)
        hits = [f for f in det(trajectory) if f.step in idx]
        flagged = sorted({f.step for f in hits})
        return Judgment(yes=bool(hits), source=f"rules:{name}", steps=idx,
                        reason=hits[0].evidence if hits else f"{name} flagged none of the judged steps",
                        flagged=flagged)


def judge_for(misbehavior: ErrorType, client: Any = None, m: int = M, mapping: Mapping[str, str] | None = None,
              examples: Mapping[str, str] | None = None, prefer: str = "llm") -> BehaviorJudge:
    """The judge of one misbehavior: the LLM when a client is given (and `prefer="llm"`), else its rule
    detector; a misbehavior with neither is an error that says so."""
    if prefer not in ("llm", "rules"):
        raise ValueError(f"prefer must be 'llm' or 'rules', got {prefer!r}")
    has_rule = has_rule_detector(misbehavior, mapping)
    if client is not None and (prefer == "llm" or not has_rule):
        return LLMBehaviorJudge(client, m=m, examples=examples)
    if has_rule:
        return RuleBehaviorJudge(m=m, mapping=mapping)
    raise ValueError(f"misbehavior {misbehavior.name!r} has no rule detector and no LLM client was given "
                     "for the behavior judge")
