"""One lock for the process's torch.compile work and CUDA graph captures.

While one thread traces a function for torch.compile, dynamo and FX keep process-wide flags set, and a
compiled function called in another thread raises ("Detected that you are using FX to symbolically
trace a dynamo-optimized function"); raised inside a CUDA graph capture, it invalidates the capture
and leaves the graph's memory pool recording, so every later capture of that engine fails ("already
recording to mempool_id"). That is what happened on a GPU when two policies were evaluated at once, each
engine capturing its graphs in its own thread. Every engine and learner in the process therefore runs
code that may compile or capture under this lock; replaying a captured graph calls no compiled Python
function and needs none.
"""

from __future__ import annotations

import threading

COMPILE_LOCK = threading.RLock()
