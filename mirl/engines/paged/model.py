"""The forward pass of a Llama-family model over paged KV, on the Hugging Face model's own weights.

Why not the transformers forward: its cache and attention want rectangular batches, so rows of
different lengths mean padding and copies, and a decode step launches ~40 kernels a layer from
Python. Here a step is a function of flat tensors (tokens [T], positions [T], the slots their KV goes
to) that a CUDA graph can capture, with q/k/v and gate/up each one matrix product: the Hugging Face
module's weights are replaced by views into one fused weight, so `load_state_dict` on the model
(new weights from a learner) writes the fused weights in place and captured graphs stay valid.

The arithmetic is the transformers modules' (RMSNorm in float32 then the weight in the model's dtype,
residual adds in the model's dtype, rotary tables computed by the model's own rotary embedding), so
greedy decoding in float32 is `model.generate`'s.

Supported: llama, mistral without a sliding window, qwen2, qwen3, with full attention and a static
rotary embedding (not "dynamic" or "longrope").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def _rope_type(cfg: Any) -> str:
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return "default"
    return str(params.get("rope_type", params.get("type", "default")) or "default")


def supports(cfg: Any) -> bool:
    """Whether this engine can run a model of config `cfg` (a transformers config)."""
    if getattr(cfg, "model_type", None) not in SUPPORTED:
        return False
    if getattr(cfg, "use_sliding_window", False) or (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)):
        return False
    types = getattr(cfg, "layer_types", None) or ["full_attention"]
    return all(t == "full_attention" for t in types) and _rope_type(cfg) in STATIC_ROPE


def supports_config(source: str | Path) -> bool:
    """`supports` for a checkpoint directory, read from its config.json without loading weights."""
    path = Path(source)
    if not (path / "config.json").is_file():
        return False
    from transformers import AutoConfig

    try:
        return supports(AutoConfig.from_pretrained(str(path)))
    except (ValueError, KeyError, json.JSONDecodeError):
        return False


@dataclass
class Layer:
    eps: float
    in_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


def _fuse(linears: list[Any], attr: str) -> torch.Tensor | None:
    """One tensor holding the linears' `attr` (weight or bias) stacked by rows, the linears' own
    parameters replaced by views into it (so the model's state dict writes the fused tensor)."""
    parts = [getattr(m, attr) for m in linears]
    if any(p is None for p in parts):
        assert all(p is None for p in parts), "some of the fused projections have a bias and some not"
        return None
    fused = torch.cat([p.detach() for p in parts], 0)
    at = 0
    for m, p in zip(linears, parts):
        n = p.shape[0]
        setattr(m, attr, torch.nn.Parameter(fused[at:at + n], requires_grad=p.requires_grad))
        at += n
    return fused


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as the transformers Llama/Qwen modules compute it."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rot * sin


def pre_attention(x: torch.Tensor, delta: torch.Tensor | None, w: Layer, cos: torch.Tensor, sin: torch.Tensor,
                  heads: int, kv_heads: int, dim: int):
    """The residual stream after the last sublayer, and this layer's q [T, heads, dim] and
    kv [T, 2, kv heads, dim] (normed, rotated)."""
    if delta is not None:
        x = x + delta
    h = rms(x, w.in_norm, w.eps)
    qkv = F.linear(h, w.qkv, w.qkv_bias)
    t = x.shape[0]
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = q.view(t, heads, dim), k.view(t, kv_heads, dim), v.view(t, kv_heads, dim)
    if w.q_norm is not None:
        q, k = rms(q, w.q_norm, w.eps), rms(k, w.k_norm, w.eps)
    cos, sin = cos[:, None], sin[:, None]
    return x, _rotate(q, cos, sin), torch.stack([_rotate(k, cos, sin), v], 1)


def post_attention(x: torch.Tensor, o: torch.Tensor, w: Layer, act: str):
    """The residual stream after attention, and the MLP's output (added at the next layer)."""
    x = x + F.linear(o.reshape(x.shape[0], -1), w.o, w.o_bias)
    h = rms(x, w.post_norm, w.eps)
    gate, up = F.linear(h, w.gate_up, w.gate_up_bias).chunk(2, -1)
    g = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh")
    return x, F.linear(g * up, w.down, w.down_bias)


def final_norm(x: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return rms(x + delta, w, eps)


class PagedModel:
    """The forward of `model` (a transformers causal LM of a supported family) over paged KV."""

    def __init__(self, model: Any, max_positions: int, compiled: bool = False):
        cfg = model.config
        if not supports(cfg):
            raise ValueError(f"the paged engine does not support model type {getattr(cfg, 'model_type', None)!r} "
                             "with this configuration (supported: llama, mistral, qwen2, qwen3 with full attention)")
        act = getattr(cfg, "hidden_act", "silu")
        if act not in ("silu", "gelu_pytorch_tanh"):
            raise ValueError(f"the paged engine does not support the activation {act!r}")
        self.act = "silu" if act == "silu" else "gelu"
        self.model = model
        body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.body = body
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.num_layers = cfg.num_hidden_layers
        self.vocab = cfg.vocab_size
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.scale = float(body.layers[0].self_attn.scaling)
        eps = float(getattr(cfg, "rms_norm_eps", 1e-6))
        self.eps = eps
        self.layers = []
        for layer in body.layers:
            a, mlp = layer.self_attn, layer.mlp
            qkv = [a.q_proj, a.k_proj, a.v_proj]
            self.layers.append(Layer(
                eps=eps, in_norm=layer.input_layernorm.weight, qkv=_fuse(qkv, "weight"), qkv_bias=_fuse(qkv, "bias"),
                q_norm=getattr(getattr(a, "q_norm", None), "weight", None),
                k_norm=getattr(getattr(a, "k_norm", None), "weight", None),
                o=a.o_proj.weight, o_bias=a.o_proj.bias, post_norm=layer.post_attention_layernorm.weight,
                gate_up=_fuse([mlp.gate_proj, mlp.up_proj], "weight"),
                gate_up_bias=_fuse([mlp.gate_proj, mlp.up_proj], "bias"),
                down=mlp.down_proj.weight, down_bias=mlp.down_proj.bias))
        self.embed = body.embed_tokens.weight
        self.norm = body.norm.weight
        self.head = model.get_output_embeddings().weight
        self.cos, self.sin = self._rope_tables(max_positions)
        self._pre, self._post, self._final = pre_attention, post_attention, final_norm
        if compiled:
            self._pre = torch.compile(pre_attention, dynamic=True)
            self._post = torch.compile(post_attention, dynamic=True)
            self._final = torch.compile(final_norm, dynamic=True)

    def _rope_tables(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n, dim] in the model's dtype, from the model's own rotary embedding."""
        rotary = getattr(self.body, "rotary_emb", None) or self.body.layers[0].self_attn.rotary_emb
        cos, sin = [], []
        dummy = torch.zeros(1, device=self.device, dtype=self.dtype)
        with torch.no_grad():
            for start in range(0, n, 4096):
                pos = torch.arange(start, min(n, start + 4096), device=self.device)[None]
                c, s = rotary(dummy, pos)
                cos.append(c[0])
                sin.append(s[0])
        return torch.cat(cos).contiguous(), torch.cat(sin).contiguous()

    def kv_bytes_per_token(self) -> int:
        return self.num_layers * 2 * self.kv_heads * self.dim * torch.empty((), dtype=self.dtype).element_size()

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, kv: torch.Tensor,
                attend) -> torch.Tensor:
        """The final normed hidden states [T, hidden] of tokens `ids` at `positions`; each layer's KV of
        them goes to `slots` of `kv` ([layers, slots, 2, kv heads, dim]); `attend(q, kv_layer)` is
        the attention over the pages."""
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[positions], self.sin[positions]
        delta = None
        for i, w in enumerate(self.layers):
            x, q, new = self._pre(x, delta, w, cos, sin, self.heads, self.kv_heads, self.dim)
            kv[i].index_copy_(0, slots, new)
            x, delta = self._post(x, attend(q, kv[i]), w, self.act)
        return self._final(x, delta, self.norm, self.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.head)
