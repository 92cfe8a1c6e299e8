"""The weight hand-off: a learner process broadcasts its stepped weights over a gloo sync group to a
generator in another process (mirl's embedded engine on a tiny checkpoint); afterwards the
generator's sampled logprobs are the learner's, before it they were not. And the vLLM adapter
imports without vLLM."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import random
import socket

import pytest
import torch

from mirl.engines.generator import teacher_forced_logprobs
from mirl.training.learner import Example, Learner, LearnerConfig
from mirl.training.scale.weight_sync import SyncGroup

PROMPT = [1, 28, 1142, 314, 253, 2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_process(ckpt: str, port: int, results) -> None:
    """The generation side: sample, receive one hand-off into the engine, sample again."""
    torch.set_num_threads(1)
    from mirl.engines.embedded import EmbeddedLM

    lm = EmbeddedLM(ckpt, device="cpu", prefill_chunk=16, prefill_bf16=False)
    samples = {}
    samples["before"] = lm.generate_tokens(PROMPT, [0, 1], max_tokens=8, temperature=1.0, seed=7).samples
    group = SyncGroup.join("127.0.0.1", port, rank=1, world=2, backend="gloo", timeout_s=120)
    loaded = group.receive_into(lm)
    samples["after"] = lm.generate_tokens(PROMPT, [0, 1], max_tokens=8, temperature=1.0, seed=7).samples
    results.put((loaded, lm.weights_version, {k: [(s.ids, s.logprobs) for s in v] for k, v in samples.items()}))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.engines.tiny import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("sync-policy"))


def test_after_a_hand_off_the_generator_samples_with_the_learners_weights(checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    learner = Learner(model, LearnerConfig(lr=5e-2, compile_layers=False))
    rng = random.Random(0)
    exs = []
    for _ in range(4):
        ids = [rng.randrange(model.config.vocab_size) for _ in range(12)]
        exs.append(Example(ids, [0] * 4 + [1] * 8, [0.0] * 4 + [-10.0] * 8))
    learner.train_step(exs, [1.0, -1.0, 0.5, -0.5])  # a large step: the weights move well away

    ctx = mp.get_context("spawn")
    results, port = ctx.Queue(), free_port()
    proc = ctx.Process(target=engine_process, args=(str(checkpoint), port, results))
    proc.start()
    try:
        group = SyncGroup.join("127.0.0.1", port, rank=0, world=2, backend="gloo", timeout_s=120)
        sent = group.send(model.named_parameters())
        loaded, version, samples = results.get(timeout=300)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    names = [n for n, _ in model.named_parameters()]
    assert loaded == sent["sync_tensors"] == len(names) and version == 1
    assert sent["sync_bytes"] == sum(p.numel() * 4 for p in model.parameters())
    model.eval()

    def gap(ids, lps):
        return max(abs(a - b) for a, b in zip(teacher_forced_logprobs(model, PROMPT, ids), lps))

    for ids, lps in samples["after"]:
        assert len(ids) == len(lps) > 0
        assert gap(ids, lps) < 1e-4
    assert max(gap(ids, lps) for ids, lps in samples["before"]) > 1e-2  # sampled from the old weights


def test_the_vllm_adapter_imports_without_vllm():
    """vLLM resolves `worker_extension_cls` by its dotted path: it must name the worker class, whose
    methods are what the driver's `collective_rpc` calls; importing it must not need vLLM."""
    import sys

    mod = importlib.import_module("mirl.training.scale.vllm_sync")
    where, _, name = mod.WORKER_EXTENSION.rpartition(".")
    worker = getattr(importlib.import_module(where), name)
    assert worker is mod.WeightSyncWorker
    for method in ("init_weight_sync", "receive_weights", "load_ipc_weights"):
        assert callable(getattr(worker, method))
    assert "vllm" not in sys.modules
