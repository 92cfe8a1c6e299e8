"""The records stages pass to each other, with schema versions, and their typed loaders: trajectories
and steps (with token ids), error steps, taxonomy types and labels, prefixes.

Each stage reads earlier outputs through these loaders (`load_error_steps(run)`), never through
file names and dicts of its own; where the files live is `mirl.runner.layout`'s business.
"""

from mirl.records.error_step import ERROR_STEP_SCHEMA, ErrorStep
from mirl.records.loaders import error_steps_frame, load_error_steps
from mirl.records.prefix import PREFIX_SCHEMA, Prefix
from mirl.records.taxonomy import TAXONOMY_SCHEMA, ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import SCHEMA_VERSION as TRAJECTORY_SCHEMA
from mirl.records.trajectory import Step, Trajectory, load_trajectories, steps_frame, trajectories_frame

__all__ = ["ERROR_STEP_SCHEMA", "PREFIX_SCHEMA", "TAXONOMY_SCHEMA", "TRAJECTORY_SCHEMA", "ErrorStep", "ErrorType",
           "Label", "Prefix", "Step", "Taxonomy", "TaxonomyStore", "Trajectory", "error_steps_frame",
           "load_error_steps", "load_trajectories", "steps_frame", "trajectories_frame"]
