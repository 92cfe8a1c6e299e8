"""The token path of an episode: each turn's prompt is the previous one's ids plus what followed.

A learner must see exactly the ids the sampler saw. Re-rendering the chat from text at every turn
does not guarantee that: decode-then-encode is not the identity (a sampler may emit a tokenization
the tokenizer would not produce), and some chat templates drop earlier reasoning blocks. So the
harness renders the chat template once, for the first prompt (system + task message + generation
prompt), and from then on only appends:

    turn k's prompt = prompt_ids + sum over steps j < k of (completion_ids[j] + observation_ids[j])

- `completion_ids`: the sampled ids, the end-of-turn token included when sampled (with their
  `logprobs`, `tokens="sampled"`); for teacher, imported or restored steps, the reply's text
  tokenized as context (`tokens="context"`, no logprobs), closed by the end-of-turn token;
- `observation_ids`: the template glue after the reply (the end-of-turn token when the sampler did
  not emit it, the next message's header), the observation's text, and the glue up to and
  including the next generation prompt.

The glue comes from the model's own chat template, derived once per tokenizer by rendering a
dummy conversation with sentinel contents and cutting around them (`ChatGlue`). Observation and
context text is tokenized with special tokens split, so a command's output that prints
"<|im_end|>" stays text. A fast tokenizer does that by flipping a flag on its shared Rust object
for the call (and leaving it flipped), so a thread rendering a chat template at the same moment would
see its special tokens split into letters: the glue encodes split text with a private copy of the
tokenizer, and its own calls are serialized. `turn_prompts` and `training_sequence` rebuild what the sampler was given
and what a learner trains on from a stored trajectory.
"""

from __future__ import annotations

import copy
import json
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mirl.agent import prompts
from mirl.agent.messages import assistant_text, step_messages
from mirl.records.trajectory import Step, Trajectory

SENTINEL = "MIRLSENTINEL{}XYZ"  # plain letters: templates pass them through unchanged
_GLUES: dict[int, tuple[Any, ChatGlue]] = {}
_GLUES_LOCK = threading.Lock()
_TOKENIZER_LOCK = threading.RLock()
_MEMO_LOCK = threading.Lock()
MEMO_SIZE = 1024  # prompts and texts whose ids a glue keeps (8 bytes an id: tens of MB at most)
MEMO_TEXT = 16_384  # longer texts (a flooding command's output) are tokenized every time


class TemplateError(ValueError):
    """The chat template cannot be cut into glue for this turn structure; the message says why."""


@dataclass
class ChatGlue:
    """The template's tokens around turns, for one tokenizer (see the module docstring)."""

    tokenizer: Any
    end_ids: set[int]
    eot_id: int | None = None  # the token the template closes an assistant turn with, when it is an end id
    _pieces: dict[tuple[str, ...], list[list[int]]] = field(default_factory=dict)
    _splitter: Any = None  # a private copy of the tokenizer for text with special-token strings split
    _memo: OrderedDict = field(default_factory=OrderedDict)  # (kind, key) -> ids: see `_memoized`

    @classmethod
    def of(cls, tokenizer: Any, end_ids: set[int]) -> ChatGlue:
        """The glue of this tokenizer, derived once per process."""
        with _GLUES_LOCK:
            hit = _GLUES.get(id(tokenizer))
            if hit is None or hit[0] is not tokenizer:
                hit = (tokenizer, cls(tokenizer, set(end_ids)))
                hit[1].pieces(("user",))  # derives eot_id too
                _GLUES[id(tokenizer)] = hit
            return hit[1]

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The first prompt: the chat template over `messages` with the generation prompt, and the
        tool schemas when the agent acts by tool calls (a template writes them into the system turn)."""
        msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        key = ("prompt", tuple((m["role"], m["content"]) for m in msgs), json.dumps(tools, sort_keys=True))
        return self._memoized(key, lambda: self._render(msgs, tools))

    def _render(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        extra = {"tools": tools} if tools else {}
        with _TOKENIZER_LOCK:  # a Hugging Face tokenizer shared by episode threads is not safe to call at once
            enc = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                                     **extra)
        ids = enc["input_ids"]
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return [int(t) for t in ids]

    def _memoized(self, key: tuple, make: Any) -> list[int]:
        """`make()`'s ids, kept for the next `MEMO_SIZE` distinct keys. A prefix's continuations (a rate
        stage's samples, a training group's rollouts) render the same first prompt and tokenize the same
        prefix steps; with 64 episodes beside a GPU engine, each rendering is GIL time the engine's
        thread waits for (`benchmarks/gpu/NOTES.md`)."""
        with _MEMO_LOCK:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return list(hit)
        ids = make()
        with _MEMO_LOCK:
            self._memo[key] = array("q", ids)  # 8 bytes an id, where a tuple of ints takes ~36
            while len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
        return list(ids)

    def pieces(self, roles: tuple[str, ...]) -> list[list[int]]:
        """Glue ids around observation messages of these roles: [before the first, between
        consecutive ones..., after the last up to the next generation prompt]."""
        if roles in self._pieces:
            return self._pieces[roles]
        reply = SENTINEL.format("A")
        obs = [SENTINEL.format(i) for i in range(len(roles))]
        convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                 {"role": "assistant", "content": reply}]
        convo += [{"role": r, "content": c, **({"tool_call_id": "call_0"} if r == "tool" else {})}
                  for r, c in zip(roles, obs)]
        try:
            text = self.tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template that cannot render this structure
            raise TemplateError(f"the chat template cannot render {' + '.join(roles)} after an assistant turn: {e}") from e
        at = text.find(reply)
        if at < 0:
            raise TemplateError("the chat template dropped the assistant reply of a dummy conversation")
        rest, cuts = text[at + len(reply):], []
        for s in obs:
            i = rest.find(s)
            if i < 0:
                raise TemplateError(f"the chat template dropped a {roles} message of a dummy conversation")
            cuts.append(rest[:i])
            rest = rest[i + len(s):]
        cuts.append(rest)
        pieces = [self._encode(c, special=True) for c in cuts]
        if len(roles) == 1 and roles == ("user",) and pieces[0] and pieces[0][0] in self.end_ids:
            self.eot_id = pieces[0][0]
        self._pieces[roles] = pieces
        return pieces

    def _encode(self, text: str, special: bool = False) -> list[int]:
        """Ids of `text`; special-token strings are parsed only in template glue (`special`)."""
        if not text:
            return []
        if len(text) <= MEMO_TEXT:
            return self._memoized(("text", special, text), lambda: self._tokenize(text, special))
        return self._tokenize(text, special)

    def _tokenize(self, text: str, special: bool) -> list[int]:
        with _TOKENIZER_LOCK:
            if special:
                return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if self._splitter is None:
                self._splitter = copy.deepcopy(self.tokenizer)
            try:
                return list(self._splitter(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
            except TypeError:  # a tokenizer without the option
                return list(self._splitter(text, add_special_tokens=False)["input_ids"])

    def text(self, ids: list[int]) -> str:
        """A completion's reply text (end tokens and other special tokens left out)."""
        return self.tokenizer.decode([t for t in ids if t not in self.end_ids], skip_special_tokens=True)

    def context_ids(self, text: str) -> list[int]:
        """A reply that was not sampled (teacher, import): its text, then the end-of-turn token."""
        return self._encode(text) + ([self.eot_id] if self.eot_id is not None else [])

    def observation_ids(self, completion_ids: list[int], messages: list[dict[str, Any]]) -> list[int]:
        """What follows a completion: glue, each message's text, glue up to the next generation prompt."""
        pieces = self.pieces(tuple(str(m["role"]) for m in messages))
        first = pieces[0]
        if self.eot_id is not None and first[:1] == [self.eot_id] and completion_ids[-1:] == [self.eot_id]:
            first = first[1:]  # the sampler already closed its turn
        ids = list(first)
        for m, glue in zip(messages, pieces[1:]):
            ids += self._encode(str(m.get("content") or "")) + glue
        return ids


class TokenPath:
    """The growing token sequence of one episode on a generator (see the module docstring)."""

    def __init__(self, generator: Any, action_format: str, sampling: dict[str, Any]):
        self.generator = generator
        self.glue = ChatGlue.of(generator.tokenizer, set(generator.end_ids))
        self.action_format = action_format
        self.sampling = sampling
        self.ids: list[int] = []

    def start(self, traj: Trajectory, first_messages: list[dict[str, Any]]) -> None:
        """The first prompt (stored once, in the trajectory), then any restored prefix as context."""
        tools = [prompts.BASH_TOOL] if self.action_format == "tool" else None  # the text path sends them too
        traj.prompt_ids = self.glue.prompt_ids(first_messages, tools)
        self.ids = list(traj.prompt_ids)
        for i, step in enumerate(traj.steps):
            self.settle(step)
            self.observe(step, i)

    def sample(self, seed: int | None = None) -> tuple[Any, Any]:
        """One sample at the current prompt: (the generation, its only sample); `seed`, the step's,
        replaces the episode's."""
        sampling = self.sampling if seed is None else {**self.sampling, "seed": seed}
        gen = self.generator.generate_tokens(list(self.ids), [0], **sampling)
        return gen, gen.samples[0]

    def settle(self, step: Step) -> None:
        """Give a step to be appended its completion ids: a sample stays a sample (ids and
        logprobs); anything else (teacher, prefix, import) is tokenized text, marked context. A
        restored step keeps its stored ids when they decode to its reply (same tokenizer)."""
        ids = step.completion_ids
        if step.tokens == "sampled" and step.source == "policy" and ids is not None and step.logprobs is not None \
                and len(step.logprobs) == len(ids) and self.glue.text(ids) == step.raw:
            return
        if not (ids and step.raw and self.glue.text(ids) == step.raw):
            ids = self.glue.context_ids(assistant_text(step, self.action_format))
        step.completion_ids, step.logprobs, step.tokens = list(ids), None, "context"

    def observe(self, step: Step, index: int) -> None:
        """Append the step's completion and observation ids to the sequence."""
        obs = step_messages(step, index, self.action_format)[1:]
        step.observation_ids = self.glue.observation_ids(step.completion_ids or [], obs)
        self.ids += list(step.completion_ids or []) + step.observation_ids


# --- rebuilding from a stored trajectory ---------------------------------------------------------


def _require_ids(traj: Trajectory, upto: int) -> None:
    if traj.prompt_ids is None:
        raise ValueError(f"trajectory {traj.task}#{traj.seed} has no token ids (its policy returned text only)")
    for i, s in enumerate(traj.steps[:upto]):
        if s.completion_ids is None or s.observation_ids is None:
            raise ValueError(f"trajectory {traj.task}#{traj.seed}: step {i} has no token ids (tokens={s.tokens!r})")


def turn_prompts(traj: Trajectory) -> list[list[int]]:
    """The prompt ids of every step, rebuilt from the stored ids (what the sampler was given)."""
    _require_ids(traj, max(0, len(traj.steps) - 1))
    prompts, ids = [], list(traj.prompt_ids or [])
    for s in traj.steps:
        prompts.append(list(ids))
        ids += list(s.completion_ids or []) + list(s.observation_ids or [])
    return prompts


def training_sequence(traj: Trajectory) -> tuple[list[int], list[int], list[float]]:
    """(ids, loss mask, sampler logprobs) of the whole episode: mask 1 and the stored logprob on
    sampled tokens; 0 on the prompt, observations and context steps (teacher, prefix)."""
    _require_ids(traj, len(traj.steps))
    ids, mask, logprobs = list(traj.prompt_ids or []), [0] * len(traj.prompt_ids or []), [0.0] * len(traj.prompt_ids or [])
    for s in traj.steps:
        comp = list(s.completion_ids or [])
        sampled = s.tokens == "sampled" and s.logprobs is not None
        ids += comp + list(s.observation_ids or [])
        mask += [int(sampled)] * len(comp) + [0] * len(s.observation_ids or [])
        logprobs += (list(s.logprobs) if sampled else [0.0] * len(comp)) + [0.0] * len(s.observation_ids or [])
    return ids, mask, logprobs
