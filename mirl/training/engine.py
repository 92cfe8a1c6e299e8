"""The Trainer seam: one object that samples (token ids in, ids and logprobs out), learns from a batch,
and hands its new weights to its sampler.

    generate_tokens(prompt_ids, sample_indices, **sampling) -> TokenGeneration   (mirl.engines.generator)
    train_step(examples, advantages) -> step stats                              (mirl.training.learner)
    update_weights() -> seconds it took: the sampler now samples from the learner's weights
    save(directory) / load(directory): a checkpoint (Hugging Face weights + optimizer state)

`EmbeddedEngine` is one process: the policy's generator (the batched CPU engine, or the transformers
engine on one GPU) and a torch learner holding a float32 copy of the same model, computing in the
sampler's precision (bf16 autocast only where the sampler's weights are not float32), so that the
logprobs the loss compares agree up to kernel rounding. The rollout code
reaches the generator through the LLM client (`models.policy`), so its calls are counted in the
ledger; the engine only owns the weights.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mirl.training.learner import Example, Learner, LearnerConfig


@runtime_checkable
class TrainEngine(Protocol):
    tokenizer: Any

    def generate_tokens(self, prompt_ids: Sequence[int], sample_indices: Sequence[int], **sampling: Any) -> Any: ...

    def train_step(self, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, float]: ...

    def update_weights(self) -> float: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


def in_samplers_precision(config: LearnerConfig, generator: Any) -> LearnerConfig:
    """`config` with bf16 off where the sampler's weights are float32 and `bf16` was left to the device:
    a float32 sampler's logprobs are matched to ~1e-6 in float32, to ~0.015 under bf16."""
    import torch

    if config.bf16 is None and next(generator.model.parameters()).dtype == torch.float32:
        return dataclasses.replace(config, bf16=False)
    return config


class EmbeddedEngine:
    """A generator and a learner in one process (see the module docstring)."""

    def __init__(self, generator: Any, config: LearnerConfig, device: str = ""):
        import torch

        if not hasattr(generator, "model"):
            raise TypeError(f"{type(generator).__name__} holds no torch model to train a copy of; the embedded "
                            "engine needs the transformers-backed generator (vLLM engines are driven by the scale path)")
        self.generator = generator
        self.tokenizer = generator.tokenizer
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = copy.deepcopy(generator.model).to(device=device, dtype=torch.float32)
        self.learner = Learner(model, in_samplers_precision(config, generator))

    def generate_tokens(self, prompt_ids, sample_indices, **sampling):
        return self.generator.generate_tokens(prompt_ids, sample_indices, **sampling)

    def train_step(self, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, float]:
        return self.learner.train_step(examples, advantages)

    def update_weights(self) -> float:
        t0 = time.perf_counter()
        self.generator.update_weights(self.learner.state_dict())
        return time.perf_counter() - t0

    def save(self, directory: Path) -> None:
        self.learner.save(directory, self.tokenizer)

    def load(self, directory: Path) -> None:
        self.learner.load(directory)
        self.update_weights()
