"""The common base of every stage: run directory layout, resume by item key, params fingerprint,
executors (threads or Ray), progress, budget and summary. A stage is a small module on top of it."""

from mirl.runner.fingerprint import ParamsMismatch
from mirl.runner.layout import RunDir
from mirl.runner.stage import Item, Stage, StageError, StopStage, run_stage

__all__ = ["Item", "ParamsMismatch", "RunDir", "Stage", "StageError", "StopStage", "run_stage"]
