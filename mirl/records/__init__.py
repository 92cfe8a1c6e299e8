"""The records stages pass to each other, with schema versions, and their typed loaders.

Each stage reads earlier outputs through these loaders (`load_error_steps(run)`), never through
file names and dicts of its own; where the files live is `mirl.runner.layout`'s business.
"""

from mirl.records.error_step import ERROR_STEP_SCHEMA, ErrorStep
from mirl.records.loaders import error_steps_frame, load_error_steps

__all__ = ["ERROR_STEP_SCHEMA", "ErrorStep", "error_steps_frame", "load_error_steps"]
