"""The embedded learner on a tiny random Llama: micro-batches keep sequences apart, micro-batching does
not change the update, the loss tokens are exactly the masked ones, and a step moves the weights."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from mirl.training.learner import Example, Learner, LearnerConfig, batch_inputs, pack, token_logprobs


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def alone(model, ex: Example) -> list[float]:
    """log_softmax of each masked target from one forward pass over this sequence only (float64)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ex.ids])).logits[0].double()
    lps = torch.log_softmax(logits, -1)
    return [float(lps[t - 1, ex.ids[t]]) for t in range(1, len(ex.ids)) if ex.mask[t]]


def examples(n: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(5, 40)
        ids = [rng.randrange(97) for _ in range(length)]
        mask = [0] * 3 + [rng.randint(0, 1) for _ in range(length - 3)]
        out.append(Example(ids, mask, [(-1.0 - rng.random()) if m else 0.0 for m in mask]))
    return out


@pytest.mark.parametrize("packed", [False, True])
def test_micro_batches_keep_sequences_apart(tiny, packed):
    exs = examples(5)
    with torch.no_grad():
        lp, _ = token_logprobs(tiny, batch_inputs(exs, "cpu", packed=packed))
    want = [v for ex in exs for v in alone(tiny, ex)]
    assert len(lp) == len(want) == sum(ex.mask[1:].count(1) for ex in exs)
    assert max(abs(a - b) for a, b in zip(lp.tolist(), want)) < 1e-4


def test_packing_fills_bins_by_cost():
    exs = [Example([1] * n, [0] * n, [0.0] * n) for n in (10, 9, 4, 3)]
    assert pack(exs, 20, padded=True) == [[0, 1], [2, 3]]  # 2 x 10 = 20, then 2 x 4
    assert pack(exs, 20, padded=False) == [[0, 1], [2, 3]]  # 19, then 7
    assert pack(exs, 25, padded=False) == [[0, 1, 2], [3]]  # 23, then 3 (26 would pass the cap)
    assert pack(exs, 5, padded=True) == [[0], [1], [2], [3]]  # longer than the cap: a bin of its own


def test_micro_batching_does_not_change_the_update(tiny):
    exs, adv = examples(6, seed=1), [0.5, -0.5, 1.0, -1.0, 0.25, -0.25]
    grads = []
    for tokens in (10_000, 40):
        model = copy.deepcopy(tiny)
        learner = Learner(model, LearnerConfig(lr=0.0, max_grad_norm=1e9, micro_batch_tokens=tokens))
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        stats = learner.train_step(exs, adv)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        assert stats["loss_tokens"] == sum(ex.loss_tokens for ex in exs)
    assert stats["micro_batches"] > 1
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_checkpointed_layers_recompute_in_backward_and_give_the_same_update(tiny):
    """`gradient_checkpointing` keeps a layer's input only and runs the layer again in the backward pass
    (a float32 learner's attention has no fused kernel for grouped KV heads, so each layer would keep its
    [heads, L, L] weights: 1.4 GiB a layer at 6.4k tokens, benchmarks/gpu/NOTES.md twelfth try)."""
    exs, adv = examples(4, seed=3), [0.5, -0.5, 1.0, -1.0]
    grads, calls = [], []
    for checkpointing in (False, True):
        model = copy.deepcopy(tiny)
        learner = Learner(model, LearnerConfig(lr=0.0, max_grad_norm=1e9, gradient_checkpointing=checkpointing))
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        n = [0]
        model.model.layers[0].self_attn.register_forward_pre_hook(lambda *_, n=n: n.__setitem__(0, n[0] + 1))
        stats = learner.train_step(exs, adv)
        calls.append(n[0] / stats["micro_batches"])
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert calls == [1, 2]  # the layer's attention ran once a micro-batch, then again in its backward pass
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_loss_is_the_token_mean_of_the_policy_gradient(tiny):
    """At mu = pi (ratio 1) DPPO's loss is -sum(A) over loss tokens / their count."""
    exs = examples(3, seed=2)
    with torch.no_grad():  # the sampler's logprobs = the learner's own at these weights
        for ex in exs:
            lp = iter(alone(tiny, ex))
            ex.logprobs = [0.0] + [next(lp) if m else 0.0 for m in ex.mask[1:]]
    adv = [1.0, -2.0, 0.5]
    learner = Learner(copy.deepcopy(tiny), LearnerConfig(lr=0.0))
    stats = learner.train_step(exs, adv)
    n = [ex.mask[1:].count(1) for ex in exs]
    assert stats["loss"] == pytest.approx(-sum(a * k for a, k in zip(adv, n)) / sum(n), abs=1e-4)
    assert stats["logprob_abs_diff"] < 1e-4 and stats["masked_share"] == 0.0


def _matched(tiny, seed: int) -> list[Example]:
    """Examples whose sampler logprobs are the model's own in float64 (a float32 sampler, to rounding)."""
    exs = examples(3, seed=seed)
    for ex in exs:
        lp = iter(alone(tiny, ex))
        ex.logprobs = [0.0] + [next(lp) if m else 0.0 for m in ex.mask[1:]]
    return exs


def test_bf16_autocast_is_what_parts_a_float32_samplers_logprobs_from_the_learners(tiny):
    """The GPU run's |log pi - log mu| of ~0.015 at identical weights was the learner's bf16 autocast
    against a float32 sampler: the same learner in float32 agrees to rounding."""
    exs, adv = _matched(tiny, 4), [1.0, -1.0, 0.5]
    f32 = Learner(copy.deepcopy(tiny), LearnerConfig(lr=0.0, bf16=False)).train_step(exs, adv)
    b16 = Learner(copy.deepcopy(tiny), LearnerConfig(lr=0.0, bf16=True)).train_step(exs, adv)
    assert f32["logprob_abs_diff"] < 1e-5
    assert b16["logprob_abs_diff"] > 100 * f32["logprob_abs_diff"]


def test_the_embedded_engine_learns_in_its_samplers_precision(tiny):
    from types import SimpleNamespace

    from mirl.training.engine import EmbeddedEngine

    def engine(dtype, bf16=None):
        gen = SimpleNamespace(model=copy.deepcopy(tiny).to(dtype), tokenizer=None)
        return EmbeddedEngine(gen, LearnerConfig(compile_layers=False, bf16=bf16), device="cpu")

    assert engine(torch.float32).learner.config.bf16 is False  # never autocast against a float32 sampler
    assert engine(torch.bfloat16).learner.config.bf16 is None  # a bf16 sampler: the device's default
    assert engine(torch.float32, bf16=True).learner.config.bf16 is True  # asked for: kept
    learner = engine(torch.bfloat16).learner
    assert next(learner.model.parameters()).dtype == torch.float32


def test_a_step_moves_the_weights_and_counts(tiny, tmp_path):
    model = copy.deepcopy(tiny)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    learner = Learner(model, LearnerConfig(lr=1e-2))
    learner.train_step(examples(4, seed=3), [1.0, -1.0, 1.0, -1.0])
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert moved and learner.steps == 1
    learner.save(tmp_path / "ck")
    other = Learner(copy.deepcopy(tiny), LearnerConfig(lr=1e-2))
    other.load(tmp_path / "ck")
    assert other.steps == 1
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in other.model.state_dict().items())
    assert other.optimizer.state_dict()["state"]  # Adam moments came back too


def test_a_checkpoint_without_optimizer_state_goes_on_with_a_fresh_one(tiny, tmp_path, caplog):
    """Only the newest checkpoint keeps its optimizer state: going on from an older one (the newer ones
    removed) loads its weights and step, starts Adam afresh, and says so."""
    import json

    model = copy.deepcopy(tiny)
    learner = Learner(model, LearnerConfig(lr=1e-2))
    learner.train_step(examples(4, seed=3), [1.0, -1.0, 1.0, -1.0])
    learner.save(tmp_path / "ck")
    (tmp_path / "ck" / "optimizer.pt").unlink()
    (tmp_path / "ck" / "state.json").write_text(json.dumps({"step": 5}))  # the training step: not the updates made
    assert json.loads((tmp_path / "ck" / "learner.json").read_text()) == {"steps": 1}
    other = Learner(copy.deepcopy(tiny), LearnerConfig(lr=1e-2))
    other.train_step(examples(4, seed=4), [1.0, -1.0, 1.0, -1.0])  # moments of its own, which must go
    other.train_step(examples(4, seed=5), [1.0, -1.0, 1.0, -1.0])
    with caplog.at_level("WARNING"):
        other.load(tmp_path / "ck")
    assert other.steps == 1 and not other.optimizer.state_dict()["state"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in other.model.state_dict().items())
    assert "no optimizer state" in caplog.text
    other.train_step(examples(4, seed=3), [1.0, -1.0, 1.0, -1.0])  # and it trains on
    assert other.steps == 2


def test_a_batch_without_loss_tokens_is_skipped(tiny):
    learner = Learner(copy.deepcopy(tiny), LearnerConfig(lr=1e-2))
    ex = Example([1, 2, 3], [0, 0, 0], [0.0] * 3)
    assert learner.train_step([ex], [1.0])["skipped"] == 1 and learner.steps == 0
    with pytest.raises(ValueError, match="advantages"):
        learner.train_step([ex], [])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_head_gives_the_plain_loss_and_gradients(tiny, temperature):
    """The chunked LM head (logits recomputed in backward, 7 rows a chunk) against the head applied
    in one piece: the same logprobs, entropies and gradients for every parameter (the tied-free head
    and the body below it)."""
    exs, adv = examples(4, seed=5), [1.0, -0.5, 0.25, -1.0]
    inputs = batch_inputs(exs, "cpu")
    seg = inputs["segment"][inputs["loss_mask"]]
    out = []
    for chunk in (0, 7):
        model = copy.deepcopy(tiny)
        lp, ent = token_logprobs(model, inputs, temperature, head_chunk=chunk)
        weights = torch.tensor(adv)[seg] * torch.linspace(0.5, 1.5, len(lp))  # a different pull on every row
        (lp * weights).sum().backward()
        out.append((lp.detach(), ent, {k: p.grad.clone() for k, p in model.named_parameters()}))
    (lp0, ent0, g0), (lp1, ent1, g1) = out
    assert len(lp0) > 7 * 2  # several chunks, the last one partial
    assert torch.allclose(lp0, lp1, atol=1e-6) and torch.allclose(ent0, ent1, atol=1e-6)
    assert g0.keys() == g1.keys() and "lm_head.weight" in g0
    for k in g0:
        assert torch.allclose(g0[k], g1[k], atol=1e-6, rtol=1e-5), k


def test_rows_of_one_length_pass_no_attention_mask(tiny):
    """Equal-length rows go without a mask (SDPA's causal flash kernel on a GPU), ragged ones with
    one; both give each sequence's own logprobs."""
    same = [Example(list(range(i, i + 12)), [0] * 4 + [1] * 8, [0.0] * 12) for i in (1, 30)]
    ragged = same[:1] + [Example(list(range(40, 49)), [0] * 3 + [1] * 6, [0.0] * 9)]
    for exs, masked in ((same, False), (ragged, True)):
        inputs = batch_inputs(exs, "cpu")
        assert ("attention_mask" in inputs) is masked
        with torch.no_grad():
            lp, _ = token_logprobs(tiny, inputs)
        want = [v for ex in exs for v in alone(tiny, ex)]
        assert max(abs(a - b) for a, b in zip(lp.tolist(), want)) < 1e-4


def test_a_compiling_learner_waits_for_the_process_compile_lock(tiny):
    """An engine capturing a CUDA graph holds `COMPILE_LOCK`; a learner whose layers are compiled must not
    run them (they may compile again) until it is released (mirl.engines.compile_lock)."""
    import threading

    from mirl.engines.compile_lock import COMPILE_LOCK

    learner = Learner(copy.deepcopy(tiny), LearnerConfig(lr=1e-2, compile_layers=False))
    learner.compiled_layers = 2  # as on a GPU; the lock is what is tested, not torch.compile on a CPU
    done = threading.Event()
    with COMPILE_LOCK:
        t = threading.Thread(target=lambda: (learner.train_step(examples(2), [1.0, -1.0]), done.set()))
        t.start()
        assert not done.wait(1.0)  # held back while an engine "captures"
    t.join(30)
    assert done.is_set() and learner.steps == 1
    plain = Learner(copy.deepcopy(tiny), LearnerConfig(lr=1e-2, compile_layers=False))
    with COMPILE_LOCK:  # uncompiled layers never wait
        t = threading.Thread(target=plain.train_step, args=(examples(2), [1.0, -1.0]))
        t.start()
        t.join(30)
        assert plain.steps == 1


def test_the_training_params_choose_whether_the_learner_compiles():
    from mirl.params import load
    from mirl.training.stage import make_engine

    class Gen:
        def __init__(self):
            from transformers import LlamaConfig, LlamaForCausalLM

            self.model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32,
                                                      num_hidden_layers=1, num_attention_heads=2,
                                                      num_key_value_heads=1))
            self.tokenizer = None

    for value, want in (("true", True), ("false", False), ("null", None)):
        t = load(None, [f"training.compile_learner={value}", "training.device=cpu"]).training
        assert make_engine(Gen(), t).learner.config.compile_layers is want
