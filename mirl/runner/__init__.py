"""The common base of every stage: run directory layout, resume by item key, params fingerprint,
executors (threads or Ray), progress, budget and summary. A stage is a small module on top of it.

Names load lazily so that `mirl.runner.layout` (where every file of a run is named) stays a leaf
that records and loaders can import without the runner's executors and LLM errors.
"""

__all__ = ["Item", "ParamsMismatch", "RunDir", "Stage", "StageError", "StopStage", "run_stage"]

_LAZY = {"ParamsMismatch": "mirl.runner.fingerprint", "RunDir": "mirl.runner.layout", "Item": "mirl.runner.stage",
         "Stage": "mirl.runner.stage", "StageError": "mirl.runner.stage", "StopStage": "mirl.runner.stage",
         "run_stage": "mirl.runner.stage"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirl.runner' has no attribute {name!r}")
