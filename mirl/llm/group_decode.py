"""Group decoding on a GPU: n continuations of one prompt, decoded by replaying CUDA graphs.

Why: the batched decoder (`mirl.llm.embedded_batch`) runs a Python loop of transformers calls per
token, about 65 ms a step on a GPU whatever the model size, so the GPU sat idle. Here the prompt's
KV cache (from the engine's prefill and prefix cache) is copied once into a static buffer that all
rows of the group read; each row's own tokens go into a static per-row buffer, and one decode step
(embedding, every layer, LM head, sampling) is captured as a CUDA graph and replayed. Attention
reads the shared prefix once for the whole group rather than once per row. On a GPU the layers'
pointwise work (norms, rotary embedding, the softmax, activations, the sampler) is fused by
`torch.compile`; the attention half, whose shapes follow the prompt length, is compiled with
dynamic shapes so that one compiled function serves every length.

Sampling is Gumbel-max: token = argmax(log_softmax(logits / T) + Gumbel noise), with the noise a
hash of (row seed, step, token id), so a row's draws depend on its seed (seed, sample index) alone,
not on what else is in the group, and the graph needs no host random state. The stored logprob is
`log_softmax(logits / T)[token]` in float32, before top-p (`mirl.llm.generator`); top-p removes the
tokens outside the nucleus before the argmax. Greedy (T <= 0) takes the argmax and stores T = 1.

Supported: decoder-only models of the Llama family with full attention (llama, mistral without a
sliding window, qwen2, qwen3); others keep the batched decoder (`GroupDecoder.supports`).
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from typing import Any

import torch

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
BLOCK = 128  # positions per suffix block: graphs exist per multiple of it, attention reads up to the next one
PREFIX_ROUND = 256  # the shared prefix buffer's length is the prompt's rounded up to this (plans get reused)
M32 = 0xFFFFFFFF
MAX_END_IDS = 16


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a * c) mod 2^32 for int64 `a` in [0, 2^32) without overflowing int64."""
    lo, hi = c & 0xFFFF, c >> 16
    return (a * lo + (((a * hi) & 0xFFFF) << 16)) & M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (lowbias32) on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Per row a 32-bit key from its 63-bit seed and the step (int64 tensors, [rows] and [1])."""
    lo, hi = seeds & M32, (seeds >> 32) & M32
    return hash32(lo ^ hash32(hi ^ hash32((step * 0x9E3779B1 + 0x632BE5AB) & M32)))


def sample_rows(logits: torch.Tensor, keys: torch.Tensor, token_hash: torch.Tensor, inv_temperature: torch.Tensor,
                greedy: bool, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(token, logprob) per row of `logits` [rows, vocab]: the contract of `mirl.llm.generator`,
    drawn by Gumbel-max with noise hash32(token_hash ^ key) (24-bit uniforms)."""
    logits = logits.float()
    if greedy:
        tok = logits.argmax(-1)
        return tok, torch.log_softmax(logits, -1).gather(-1, tok[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits * inv_temperature, -1)
    score = logp
    if 0 < top_p < 1:
        sorted_p, order = logp.exp().sort(-1, descending=True)
        keep_sorted = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the top token
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        score = torch.where(keep, logp, torch.full_like(logp, -math.inf))
    bits = hash32(token_hash[None, :] ^ keys[:, None]) >> 8
    u = (bits.float() + 0.5) * (1.0 / (1 << 24))
    tok = (score - torch.log(-torch.log(u))).argmax(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


def _pre_attention(layer, x, cos, sin, rope):
    """Norm, q/k/v projections (with Qwen3's q/k norms) and the rotary embedding of one position
    per row: q [rows, heads, 1, d], k and v [rows, kv_heads, 1, d]."""
    attn = layer.self_attn
    h = layer.input_layernorm(x)
    shape = (x.shape[0], 1, -1, attn.head_dim)
    q = attn.q_proj(h).view(shape)
    k = attn.k_proj(h).view(shape)
    v = attn.v_proj(h).view(shape)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return q, k, v.transpose(1, 2)


def _attend(layer, x, q, kp, vp, ks, vs, bias, heads: int, kv_heads: int):
    """Each row's one query over the shared prefix (kp, vp [kv_heads, P, d], read once for the
    group) and its own positions (ks, vs [rows, kv_heads, S, d]) in one softmax, `bias` [P + S]
    masking what is not there yet; then the output projection, residual, norm, MLP, residual."""
    rows, d = q.shape[0], q.shape[-1]
    g, prefix = heads // kv_heads, kp.shape[1]
    qg = q.reshape(rows, kv_heads, g, d)
    qp = qg.transpose(0, 1).reshape(kv_heads, rows * g, d)
    sp = torch.matmul(qp, kp.transpose(1, 2)).view(kv_heads, rows, g, -1).transpose(0, 1)
    ss = torch.matmul(qg, ks.transpose(2, 3))
    scores = torch.cat([sp, ss], -1).float() * layer.self_attn.scaling + bias
    probs = torch.softmax(scores, -1).to(q.dtype)
    pp = probs[..., :prefix].transpose(0, 1).reshape(kv_heads, rows * g, prefix)
    o = torch.matmul(pp, vp).view(kv_heads, rows, g, d).transpose(0, 1) + torch.matmul(probs[..., prefix:], vs)
    x = x + layer.self_attn.o_proj(o.reshape(rows, 1, heads * d))
    return x + layer.mlp(layer.post_attention_layernorm(x))


class _Plan:
    """Static buffers for one (rows, prefix capacity, suffix capacity, dtype); graphs per mode and block."""

    def __init__(self, model, rows: int, prefix_cap: int, suffix_cap: int):
        cfg = model.config
        p = next(model.parameters())
        layers = cfg.num_hidden_layers
        kvh = cfg.num_key_value_heads
        d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dev, dt = p.device, p.dtype
        self.rows, self.prefix_cap, self.suffix_cap = rows, prefix_cap, suffix_cap
        self.kp = [torch.zeros(kvh, prefix_cap, d, device=dev, dtype=dt) for _ in range(layers)]
        self.vp = [torch.zeros(kvh, prefix_cap, d, device=dev, dtype=dt) for _ in range(layers)]
        self.ks = [torch.zeros(rows, kvh, suffix_cap, d, device=dev, dtype=dt) for _ in range(layers)]
        self.vs = [torch.zeros(rows, kvh, suffix_cap, d, device=dev, dtype=dt) for _ in range(layers)]
        self.prefix_bias = torch.zeros(prefix_cap, device=dev, dtype=torch.float32)
        self.prefix_len = torch.zeros(1, device=dev, dtype=torch.long)
        self.t = torch.zeros(1, device=dev, dtype=torch.long)
        self.tokens = torch.zeros(rows, suffix_cap, device=dev, dtype=torch.long)
        self.logprobs = torch.zeros(rows, suffix_cap, device=dev, dtype=torch.float32)
        self.done = torch.zeros(rows, device=dev, dtype=torch.bool)
        self.end = torch.full((MAX_END_IDS,), -1, device=dev, dtype=torch.long)
        self.seeds = torch.zeros(rows, device=dev, dtype=torch.long)
        self.inv_temperature = torch.ones(1, device=dev, dtype=torch.float32)
        self.suffix_pos = torch.arange(suffix_cap, device=dev)
        self.graphs: dict[tuple, Any] = {}
        self.pool = None
        self.nbytes = sum(b.nelement() * b.element_size() for b in self.kp + self.vp + self.ks + self.vs)


class GroupDecoder:
    """Decodes groups of rows from one prompt for a transformers causal LM (see the module docstring).

    `graphs` (CUDA graphs) and `compiled` (torch.compile of the pointwise parts) default to on for
    a CUDA model and off otherwise, where the same steps run eagerly (for tests on a CPU).
    `compile_attention` (with `compiled`, on unless False) compiles the attention and MLP half too,
    with dynamic shapes: a quarter faster per step, ~15 s more on the first call of a process."""

    def __init__(self, model: Any, graphs: bool | None = None, compiled: bool | None = None, max_plans: int = 2,
                 compile_attention: bool | None = None):
        if not self.supports(model):
            raise ValueError(f"group decoding does not support model type {model.config.model_type!r}")
        self.model = model
        self.body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.layers = list(self.body.layers)
        p = next(model.parameters())
        on_gpu = p.device.type == "cuda"
        self.graphs = on_gpu if graphs is None else graphs
        self.compiled = on_gpu if compiled is None else compiled
        self.rope = sys.modules[type(self.layers[0].self_attn).__module__].apply_rotary_pos_emb
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.vocab = cfg.vocab_size
        self.token_hash = hash32(torch.arange(self.vocab, device=p.device, dtype=torch.long))
        self.max_plans = max_plans
        self._plans: OrderedDict[tuple, _Plan] = OrderedDict()
        self._pre, self._attend, self._sample = _pre_attention, _attend, sample_rows
        if self.compiled:
            from torch import _dynamo

            _dynamo.config.cache_size_limit = max(_dynamo.config.cache_size_limit, 64)
            self._pre = torch.compile(_pre_attention, dynamic=False)
            if compile_attention is not False:  # after the first new length: dynamic shapes
                self._attend = torch.compile(_attend, dynamic=None)
            self._sample = torch.compile(sample_rows, dynamic=False)
        self.stats = {"plans_built": 0, "graphs_captured": 0, "decode_s": 0.0, "steps": 0}

    @staticmethod
    def supports(model: Any) -> bool:
        cfg = getattr(model, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
            return False
        if getattr(cfg, "model_type", None) == "mistral" and getattr(cfg, "sliding_window", None):
            return False
        if getattr(cfg, "use_sliding_window", False):
            return False
        types = getattr(cfg, "layer_types", None) or ["full_attention"]
        rope = getattr(cfg, "rope_scaling", None) or {}
        return all(t == "full_attention" for t in types) and rope.get("rope_type", "default") != "longrope"

    def clear(self) -> None:
        """Drop buffers and graphs (after new weights: graphs read the parameters in place, so they
        stay valid, but the buffers hold the old prompt's KV)."""
        self._plans.clear()

    # --- one decode step -------------------------------------------------------------------------

    def _step(self, plan: _Plan, span: int, greedy: bool, top_p: float) -> None:
        """Feed token t of every row, sample token t + 1, advance t (all on the device)."""
        tok = plan.tokens.index_select(1, plan.t)  # [rows, 1]
        x = self.body.embed_tokens(tok)
        pos = (plan.prefix_len + plan.t).expand(plan.rows)[:, None]
        cos, sin = self.body.rotary_emb(x, pos)
        suffix_bias = torch.where(plan.suffix_pos[:span] <= plan.t, 0.0, -math.inf)
        bias = torch.cat([plan.prefix_bias, suffix_bias])
        for i, layer in enumerate(self.layers):
            q, k, v = self._pre(layer, x, cos, sin, self.rope)
            plan.ks[i].index_copy_(2, plan.t, k)
            plan.vs[i].index_copy_(2, plan.t, v)
            x = self._attend(layer, x, q, plan.kp[i], plan.vp[i], plan.ks[i][:, :, :span], plan.vs[i][:, :, :span],
                             bias, self.heads, self.kv_heads)
        logits = self.model.lm_head(self.body.norm(x))[:, 0]
        nxt = plan.t + 1
        new, lp = self._sample(logits, row_keys(plan.seeds, nxt), self.token_hash, plan.inv_temperature,
                               greedy, top_p)
        plan.tokens.index_copy_(1, nxt, new[:, None])
        plan.logprobs.index_copy_(1, nxt, lp[:, None])
        plan.done |= (new[:, None] == plan.end[None, :]).any(-1)
        plan.t.add_(1)

    def _run_step(self, plan: _Plan, t: int, greedy: bool, top_p: float) -> None:
        span = min(plan.suffix_cap, (t // BLOCK + 1) * BLOCK)
        if not self.graphs:
            self._step(plan, span, greedy, top_p)
            return
        key = (span, greedy, top_p)
        graph = plan.graphs.get(key)
        if graph is None:  # this step runs eagerly while its graph is captured
            plan.graphs[key] = self._capture(plan, span, greedy, top_p)
            return
        graph.replay()

    def _capture(self, plan: _Plan, span: int, greedy: bool, top_p: float):
        """Run this step eagerly on a side stream (compiling the first time: the warm-up a capture
        needs), then capture it; a capture launches nothing, so the step runs once."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(plan, span, greedy, top_p)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if plan.pool is None:
            plan.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=plan.pool):
            self._step(plan, span, greedy, top_p)
        self.stats["graphs_captured"] += 1
        return graph

    # --- a group ---------------------------------------------------------------------------------

    def _plan(self, rows: int, prefix: int, new: int) -> _Plan:
        prefix_cap = -(-prefix // PREFIX_ROUND) * PREFIX_ROUND
        suffix_cap = -(-new // BLOCK) * BLOCK
        key = (rows, prefix_cap, suffix_cap)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        while len(self._plans) >= self.max_plans:
            self._plans.popitem(last=False)
        plan = _Plan(self.model, rows, prefix_cap, suffix_cap)
        self._plans[key] = plan
        self.stats["plans_built"] += 1
        return plan

    def generate(self, prefix_kv: list[tuple[torch.Tensor, torch.Tensor]], first_logits: torch.Tensor,
                 seeds: list[int], max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 end_ids: set[int] | frozenset[int] = frozenset(), check_every: int = 32
                 ) -> list[tuple[list[int], list[float], str]]:
        """Per row (ids, logprobs, finish_reason) of up to `max_tokens` tokens after a prompt whose
        per-layer KV is `prefix_kv` ([1, kv_heads, P, d] each) and whose last position's logits
        are `first_logits` ([1, vocab] or [vocab]). Row r draws with seed `seeds[r]`."""
        import time

        rows, prefix = len(seeds), int(prefix_kv[0][0].shape[2])
        if rows == 0 or max_tokens <= 0:
            return [([], [], "length") for _ in seeds]
        plan = self._plan(rows, prefix, max_tokens)
        greedy = temperature <= 0
        top_p = float(top_p) if (0 < top_p < 1 and not greedy) else 1.0
        ends = sorted(int(e) for e in end_ids)
        if len(ends) > MAX_END_IDS:
            raise ValueError(f"group decoding takes at most {MAX_END_IDS} end token ids, got {len(ends)}")
        plan.end.fill_(-1)
        plan.end[:len(ends)] = torch.tensor(ends, dtype=torch.long)
        for i, (k, v) in enumerate(prefix_kv):
            plan.kp[i][:, :prefix].copy_(k[0])
            plan.vp[i][:, :prefix].copy_(v[0])
        plan.prefix_bias.fill_(-math.inf)
        plan.prefix_bias[:prefix] = 0.0
        plan.prefix_len.fill_(prefix)
        plan.seeds.copy_(torch.tensor([s & ((1 << 63) - 1) for s in seeds], dtype=torch.long))
        plan.inv_temperature.fill_(1.0 / temperature if not greedy else 1.0)
        plan.t.zero_()
        first = first_logits.reshape(1, -1).expand(rows, -1)
        tok, lp = self._sample(first, row_keys(plan.seeds, plan.t), self.token_hash, plan.inv_temperature,
                               greedy, top_p)
        plan.tokens[:, 0] = tok
        plan.logprobs[:, 0] = lp
        plan.done.copy_((tok[:, None] == plan.end[None, :]).any(-1))
        t0 = time.perf_counter()
        steps = 0
        for t in range(max_tokens - 1):
            if t % check_every == 0 and bool(plan.done.all()):
                break
            self._run_step(plan, t, greedy, top_p)
            steps += 1
        tokens = plan.tokens[:, :steps + 1].tolist()
        logprobs = plan.logprobs[:, :steps + 1].tolist()
        self.stats["decode_s"] += time.perf_counter() - t0
        self.stats["steps"] += steps
        out = []
        for ids, lps in zip(tokens, logprobs):
            end = next((j for j, x in enumerate(ids) if x in end_ids), None)
            if end is not None:
                out.append((ids[:end + 1], lps[:end + 1], "stop"))
            else:
                out.append((ids[:max_tokens], lps[:max_tokens], "length"))
        return out
