"""A deterministic token-level policy and a sandbox for the scale path's tests, importable by Ray
actors as `tests.training.scale_doubles` (their PYTHONPATH is the repository root).

`SeededGenerator` answers on the real SmolLM2 tokenizer (saved to a directory the actors load):
each sample's reply depends only on (seed, sample index, turn), never on call order, so rollouts
played in any process, in any interleaving, are the same; its logprobs are made up the same way.
`CoinSandbox` passes a rollout when the last number it echoed is even."""

from __future__ import annotations

import hashlib
import re

from mirl.agent.config import AgentConfig
from mirl.engines.generator import TokenGeneration, TokenSample
from mirl.sandbox.base import VerifyResult
from mirl.training.rollouts import GroupPlayer
from tests.agent.agent_doubles import SUBMIT, FakeSession, bash, make_task


def _h(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little")


class SeededGenerator:
    name = "seeded-tokens"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.end_ids = {tokenizer.eos_token_id, self.im_end}
        self.weights: dict = {}

    def generate_tokens(self, prompt_ids, sample_indices, max_tokens=256, temperature=1.0, top_p=1.0, seed=0):
        turn = list(prompt_ids).count(self.im_end)
        out = []
        for i in sample_indices:
            h = _h(seed, i, turn, len(self.weights))
            text = SUBMIT if turn >= 6 or h % 4 == 0 else bash(f"echo {h % 100}")
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.im_end]
            out.append(TokenSample(ids=ids, logprobs=[-((h >> k) % 997) / 1000 for k in range(len(ids))],
                                   finish_reason="stop"))
        return TokenGeneration(samples=out, prompt_tokens=len(prompt_ids))

    def update_weights(self, weights):
        self.weights = dict(weights)


class CoinSession(FakeSession):
    def verify(self):
        self.verified = True
        echoed = [int(m) for c, _ in self.ran for m in re.findall(r"^echo (\d+)$", c)]
        return VerifyResult(reward=float(bool(echoed) and echoed[-1] % 2 == 0), exit_code=0, duration_s=0.001,
                            tail="")


class CoinSandbox:
    name = "coin"

    def start(self, task):
        return CoinSession(task)


def make_player(tokenizer_dir: str, workers: int = 4) -> GroupPlayer:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tasks = {"t1": make_task(task_id="t1"), "t2": make_task(task_id="t2")}
    agent = AgentConfig(max_steps=4, max_output_tokens=64, temperature=1.0, token_ids=True, verify=True)
    return GroupPlayer(tasks=tasks, trajectories={}, sandbox=CoinSandbox(), policy=SeededGenerator(tok), agent=agent,
                       reward="outcome", workers=workers)
