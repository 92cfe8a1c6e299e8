"""Where work items run: local threads or a Ray cluster, behind one interface that hands back futures.

The runner keeps at most `width` items in flight and is the only writer of the stage's files, so
both executors need only `submit(stage, item) -> Future` and `shutdown()`. On Ray the stage object
travels to the worker by pickling (stages keep live resources out of their pickled state and
rebuild them once per process), and the item's record comes back as plain data.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class ExecutorError(RuntimeError):
    """An executor that cannot start (e.g. Ray asked for but not installed); the message says what to do."""


class ThreadExecutor:
    def __init__(self, width: int):
        self.width = max(1, int(width))
        self._pool = ThreadPoolExecutor(max_workers=self.width, thread_name_prefix="item")

    def submit(self, stage: Any, item: Any) -> Future:
        return self._pool.submit(stage.run_item, item)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _run_remote(stage: Any, item: Any) -> Any:
    return stage.run_item(item)


class RayExecutor:
    def __init__(self, address: str, width: int):
        try:
            import ray
        except ImportError:
            raise ExecutorError("ray_address needs the ray package: pip install 'mirl[ray]' "
                                "(or leave ray_address empty for local workers)") from None
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        self.width = max(1, int(width))
        self._remote = ray.remote(_run_remote)

    def submit(self, stage: Any, item: Any) -> Future:
        return self._remote.remote(stage, item).future()

    def shutdown(self) -> None:
        pass


def make_executor(width: int, ray_address: str = "") -> ThreadExecutor | RayExecutor:
    return RayExecutor(ray_address, width) if ray_address else ThreadExecutor(width)
