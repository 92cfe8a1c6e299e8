"""A policy checkpoint made cheaply: the embedded SmolLM2 with one weight tensor scaled, saved in
Hugging Face format. Only a copy is changed; the process-wide engine keeps its weights."""

from __future__ import annotations

import copy
from pathlib import Path

from tests.real import missing

PERTURBED = "model.norm.weight"


def smollm2():
    from mirl.engines import registry, weights

    try:
        return registry.get("smollm2")
    except weights.EmbeddedModelMissing as e:
        missing(f"the embedded SmolLM2 model: {e}", "bash scripts/setup.sh")


def perturbed_checkpoint(directory: Path, scale: float = 1.25) -> Path:
    import torch

    from mirl.engines.weights import save_pretrained

    engine = smollm2()
    model = copy.deepcopy(engine.model)
    with torch.no_grad():
        model.get_parameter(PERTURBED).mul_(scale)
    save_pretrained(model, engine.tokenizer, directory)
    before = engine.model.get_parameter(PERTURBED)
    assert not torch.equal(before, model.get_parameter(PERTURBED)), "the copy shares the engine's weights"
    return Path(directory)
