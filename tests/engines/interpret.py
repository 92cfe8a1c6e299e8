"""Run the Triton kernels on a CPU: `TRITON_INTERPRET=1`, set before triton is imported.

Triton 3.6's interpreter turns a loop bound loaded from memory into an int with `int(array)`, which
NumPy 2.4 refuses for the one-element arrays it holds scalars in; the shim below reads the element.
Import this module first in a process that runs kernels (the kernel tests run in a subprocess).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

from triton.runtime import interpreter  # noqa: E402

_patch = interpreter._patch_lang_tensor


def _patch_lang_tensor(tensor, scope):
    _patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


interpreter._patch_lang_tensor = _patch_lang_tensor
