"""Sandboxes: a fresh, confined copy of a task's environment per episode.

See `mirl.sandbox.base` for the contract every backend keeps.
"""

from mirl.sandbox.base import (
    CommandResult,
    Sandbox,
    SandboxConfig,
    SandboxError,
    Session,
    VerifyResult,
)
from mirl.sandbox.select import make_sandbox

__all__ = ["CommandResult", "Sandbox", "SandboxConfig", "SandboxError", "Session", "VerifyResult", "make_sandbox"]
