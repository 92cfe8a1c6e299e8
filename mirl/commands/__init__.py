"""Sub-commands of the `mirl` CLI, one module per noun; see `mirl.cli`."""
