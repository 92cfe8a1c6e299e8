"""Language models: one choke point (`mirl.llm.client`) for every call, in every role.

- `client.LLMClient`: cache, retries, ledger, budget and JSON replies around `litellm.completion`;
- `config.LLMConfig`: which model serves each role (YAML examples in its docstring);
- `providers`: in-process models through litellm: `local/<name>` (the engines of `mirl.engines`, e.g.
  SmolLM2-135M as `local/smollm2`, the default that needs no keys) and `scripted/<name>`;
- `scripted.ScriptedModel`: deterministic replies for tests (`scripted/<name>` once registered);
- `client_generator.ClientGenerator`: a role's token-level engine, counted in the ledger;
- `ledger.read_ledger` / `ledger.summarize`: what the calls cost, as DataFrames.
"""

import os as _os

# litellm downloads a price map at import unless told to use its bundled copy; CI has no network.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from mirl.llm.types import ROLES, Completion, Model  # noqa: E402

__all__ = ["ROLES", "Completion", "Model", "LLMClient", "LLMConfig", "LLMError", "BudgetExceeded", "ScriptedModel"]

_LAZY = {"LLMClient": "mirl.llm.client", "LLMConfig": "mirl.llm.config", "LLMError": "mirl.llm.errors",
         "BudgetExceeded": "mirl.llm.errors", "ScriptedModel": "mirl.llm.scripted"}


def __getattr__(name):  # keeps `import mirl.llm` light; litellm loads only when a client is made
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirl.llm' has no attribute {name!r}")
