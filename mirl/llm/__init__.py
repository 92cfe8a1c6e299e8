"""Language models: one choke point (`mirl.llm.client`) for every call, in every role."""

from mirl.llm.types import Completion, Model

__all__ = ["Completion", "Model"]
