"""A data-parallel learner on DeepSpeed ZeRO-2 or ZeRO-3, with the embedded `Learner`'s step semantics.

Every rank is handed the same batch and takes its share (`shard`: examples spread so ranks get
about equal tokens). The loss is still the token-level mean over the WHOLE batch: each micro-batch's
loss is weighted by its loss tokens over the batch's total, and by the world size, because DeepSpeed
averages the ranks' gradients where the single learner sums micro-batches. Every rank runs the same
number of forward/backward passes (ZeRO's collectives fire in them): a rank with fewer micro-batches
runs zero-weighted ones on its first example. The micro-batch loss is `Learner.micro_loss`, the same
code as the embedded learner; AdamW, clipping to `max_grad_norm` and the step stats are the same too,
so on one batch the update equals the single-process one (`mirl.training.scale.parity` checks it).

Launch with torchrun (`torchrun --nproc_per_node N ...`): the env it sets (RANK, WORLD_SIZE,
MASTER_ADDR) starts the process group; without it the learner is a group of one. NCCL on GPUs, gloo
on a CPU (DeepSpeed's CPU accelerator, chosen when no GPU is visible; `DS_ACCELERATOR=cpu` forces it).
DeepSpeed's compiled ops are not needed (install with DS_BUILD_OPS=0): the optimizer is torch's AdamW.

ZeRO-3 partitions the weights: `named_weights` gathers one tensor at a time (a collective every rank
joins) for the hand-off to the generators, and `save` gathers all of them for the Hugging Face copy.
The chunked LM head needs the whole head weight, so under ZeRO-3 the head runs in one piece.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from mirl.training.learner import STAT_SUMS, Example, Learner, LearnerConfig, step_stats, token_logprobs


def shard(examples: Sequence[Example], world: int) -> list[list[int]]:
    """Indices of `examples` per rank: longest first, each to the rank with the fewest tokens so far
    (lowest rank on ties); the same on every rank, so no rank has to be told the others' shares."""
    shares: list[list[int]] = [[] for _ in range(world)]
    load = [0] * world
    for i in sorted(range(len(examples)), key=lambda i: (-len(examples[i].ids), i)):
        r = min(range(world), key=lambda r: (load[r], r))
        shares[r].append(i)
        load[r] += len(examples[i].ids)
    return [sorted(s) for s in shares]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(backend: str = "") -> tuple[int, int]:
    """(rank, world size) of the process group, started from torchrun's env (or as a group of one)."""
    import deepspeed
    import torch.distributed as dist

    if not dist.is_initialized():
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":  # each rank on its own GPU before NCCL binds one
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
    return dist.get_rank(), dist.get_world_size()


def ds_config(config: LearnerConfig, stage: int, bf16: bool) -> dict[str, Any]:
    """DeepSpeed's config for this learner: micro-batching and accumulation are the learner's own."""
    if stage not in (2, 3):
        raise ValueError(f"zero stage must be 2 or 3, got {stage}")
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": False, "contiguous_gradients": True}
    if stage == 3:
        zero.update(stage3_gather_16bit_weights_on_model_save=False)
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "gradient_clipping": config.max_grad_norm, "zero_optimization": zero,
            "zero_allow_untested_optimizer": True, "bf16": {"enabled": bool(bf16)},
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


class PolicyLogprobs(torch.nn.Module):
    """The policy with `token_logprobs` as its forward, so the engine's own forward (which ZeRO's
    accumulation bookkeeping hooks into) runs the whole pass, body and head."""

    def __init__(self, policy: Any, temperature: float, head_chunk: int):
        super().__init__()
        self.policy, self.temperature, self.head_chunk = policy, temperature, head_chunk

    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs(self.policy, inputs, self.temperature, self.head_chunk)


class ZeroLearner(Learner):
    """`Learner` on a DeepSpeed engine: same `train_step`, `state_dict`, `save`, `load`; call them on
    every rank (see the module docstring)."""

    def __init__(self, model: Any, config: LearnerConfig | None = None, stage: int = 2, bf16: bool | None = None,
                 backend: str = ""):
        import deepspeed

        self.config = c = config or LearnerConfig()
        if c.loss not in ("dppo", "clipped"):
            raise ValueError(f"learner: loss must be 'dppo' or 'clipped', got {c.loss!r}")
        self.rank, self.world = init_distributed(backend)
        if torch.cuda.is_available():
            model = model.to(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
        self.stage = stage
        if bf16 is None:  # the config's (the sampler's precision, `in_samplers_precision`), else the device's
            bf16 = torch.cuda.is_available() if c.bf16 is None else c.bf16
        self.bf16 = bf16
        if c.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        for p in model.parameters():
            p.requires_grad_(True)
        fused = {"fused": True} if torch.cuda.is_available() else {}
        optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=c.betas, weight_decay=c.weight_decay,
                                      eps=c.adam_eps, **fused)
        wrapped = PolicyLogprobs(model, c.temperature, c.head_chunk)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=wrapped, optimizer=optimizer,
                                                                 config=ds_config(c, stage, self.bf16))
        self.model = self.engine.module.policy
        self.device = self.engine.device
        self.compiled_layers = 0
        self.steps = 0

    def _logprobs(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.engine(inputs)

    def _autocast(self):
        return contextlib.nullcontext()  # DeepSpeed's bf16 mode keeps the module in bf16 itself

    # --- one step ---------------------------------------------------------------------------------

    def backward(self, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, Any]:
        """This rank's share of the batch through forward and backward (gradients reduced, not yet
        applied); returns the stats so far. `step()` applies them; `train_step` is both."""
        if len(examples) != len(advantages):
            raise ValueError(f"train_step: {len(examples)} examples but {len(advantages)} advantages")
        total = sum(ex.loss_tokens for ex in examples)
        stats: dict[str, Any] = {"sequences": len(examples), "loss_tokens": total,
                                 "tokens": sum(len(ex.ids) for ex in examples), "ranks": self.world}
        if total == 0:
            return {**stats, "skipped": 1}
        shares = shard(examples, self.world)
        plans = [[[share[j] for j in mb] for mb in self.micro_batches([examples[i] for i in share])] if share else []
                 for share in shares]
        mine, rounds = plans[self.rank], max(len(p) for p in plans)
        filler = [shares[self.rank][0] if shares[self.rank] else 0]
        self.model.train()
        sums = dict.fromkeys(STAT_SUMS, 0.0)
        # the engine's accumulation count is this step's (ZeRO-3 accumulates partitions by it); the loss
        # weights below are the whole scaling, so the engine does not divide by the count
        self.engine.set_train_batch_size(rounds * self.world)
        for k in range(rounds):
            idx = mine[k] if k < len(mine) else filler
            batch = [examples[i] for i in idx]
            n = sum(ex.loss_tokens for ex in batch) if k < len(mine) else 0
            if n == 0:  # a pass that adds nothing, so every rank joins the same collectives
                loss = self.micro_loss(batch, [advantages[i] for i in idx], dict.fromkeys(STAT_SUMS, 0.0))
                weight = 0.0
            else:
                loss = self.micro_loss(batch, [advantages[i] for i in idx], sums)
                weight = n / total * self.world  # the engine averages over ranks; the batch mean is a sum
            self.engine.set_gradient_accumulation_boundary(k == rounds - 1)
            self.engine.backward(loss * weight, scale_wrt_gas=False)
        self._sums = self._all_sum(sums)
        stats["micro_batches"] = rounds
        return stats

    def step(self, stats: dict[str, Any], t0: float) -> dict[str, Any]:
        """Apply the reduced gradients (clipped, AdamW) and finish the step's stats."""
        self.engine.step()
        self.steps += 1
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else float("nan")
        seconds = time.perf_counter() - t0
        stats.update(step_stats(self._sums, stats["loss_tokens"], norm, stats["micro_batches"], seconds,
                                stats["tokens"]))
        return stats

    def train_step(self, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, float]:
        t0 = time.perf_counter()
        stats = self.backward(examples, advantages)
        if stats.get("skipped"):
            return {**stats, "learner_s": round(time.perf_counter() - t0, 4)}
        return self.step(stats, t0)

    def _all_sum(self, sums: dict[str, float]) -> dict[str, float]:
        import torch.distributed as dist

        if self.world == 1:
            return sums
        t = torch.tensor([sums[k] for k in STAT_SUMS], dtype=torch.float64,
                         device=self.device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t)
        return dict(zip(STAT_SUMS, t.tolist()))

    # --- weights ----------------------------------------------------------------------------------

    def _gathered(self, params: list[Any]):
        """The full values of `params` inside the context (ZeRO-3 gathers them; ZeRO-2 holds them)."""
        if self.stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(params, modifier_rank=None)

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of every parameter, one gathered at a time; every rank must iterate."""
        for name, p in self.model.named_parameters():
            with self._gathered([p]):
                yield name, p.detach().clone()

    def state_dict(self) -> dict[str, Any]:
        return dict(self.named_weights())

    def save(self, directory: Any, tokenizer: Any = None) -> None:
        """Hugging Face weights (written by rank 0) plus DeepSpeed's partitioned optimizer state
        (each rank writes its part) under `zero/`; every rank must call it."""
        import torch.distributed as dist

        from mirl.engines.weights import save_pretrained

        d = Path(directory)
        with self._gathered(list(self.model.parameters())):
            if self.rank == 0:
                save_pretrained(self.model, tokenizer, d)
        dist.barrier()
        self.engine.save_checkpoint(str(d / "zero"), tag="state", client_state={"steps": self.steps})

    def load(self, directory: Any) -> None:
        """Weights and optimizer state from a checkpoint written by `save` (on every rank)."""
        d = Path(directory)
        if not (d / "zero").is_dir():
            raise FileNotFoundError(f"{d}: no zero/ optimizer state (only the newest checkpoint keeps it; or is "
                                    "this a checkpoint of the embedded learner?)")
        _, client = self.engine.load_checkpoint(str(d / "zero"), tag="state")
        self.steps = int((client or {}).get("steps", 0))
