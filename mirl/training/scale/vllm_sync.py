"""The weight hand-off into vLLM engines, through vLLM's worker extension and `collective_rpc`.

vLLM runs the model in worker processes; an engine built with
`LLM(model, worker_extension_cls=WORKER_EXTENSION, ...)` gives each worker the methods of
`WeightSyncWorker`, which the driver calls on all of them with `llm.collective_rpc(name, args=...)`.
Each worker joins the learner's sync group (`mirl.training.scale.weight_sync.SyncGroup`, NCCL) as
rank `rank_offset + its rank in vLLM`, then on each hand-off receives the tensors one by one and
loads each with the model's `load_weights` (which shards it for tensor parallelism). Colocated
on the learner's GPU, the worker opens CUDA IPC handles instead.

`collective_rpc` returns when the workers are done, and they are done only after the learner has
sent, so `VLLMWeightSync` issues it from a thread while the caller sends. Nothing here imports
vLLM: the module loads (and is tested for that) without it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

WORKER_EXTENSION = "mirl.training.scale.vllm_sync.WeightSyncWorker"


class WeightSyncWorker:
    """Mixed into each vLLM worker (it has `self.device` and `self.model_runner`)."""

    def init_weight_sync(self, host: str, port: int, rank_offset: int, world: int) -> int:
        from vllm.distributed.parallel_state import get_world_group

        from mirl.training.scale.weight_sync import SyncGroup

        rank = get_world_group().rank + rank_offset
        self.weight_sync = SyncGroup.join(host, port, rank, world, backend="nccl", device=str(self.device))
        return rank

    def receive_weights(self) -> int:
        """One hand-off, each tensor loaded as it arrives; returns how many."""
        n = 0
        for name, tensor in self.weight_sync.receive_each():
            self.model_runner.model.load_weights(weights=[(name, tensor)])
            n += 1
        return n

    def load_ipc_weights(self, handles: list[tuple[str, Any]]) -> int:
        """Colocated: load from the learner's GPU memory through CUDA IPC handles."""
        from mirl.training.scale.weight_sync import open_ipc_handles

        weights = open_ipc_handles(handles, device=self.device.index)
        self.model_runner.model.load_weights(weights=list(weights.items()))
        return len(weights)


class VLLMWeightSync:
    """The driver side for one `vllm.LLM` built with `worker_extension_cls=WORKER_EXTENSION`."""

    def __init__(self, llm: Any):
        self.llm = llm

    def _rpc(self, method: str, args: tuple = ()) -> tuple[threading.Thread, list[Any]]:
        out: list[Any] = []
        thread = threading.Thread(target=lambda: out.append(self.llm.collective_rpc(method, args=args)), daemon=True)
        thread.start()
        return thread, out

    def connect(self, host: str, port: int, rank_offset: int, world: int, join_sender) -> Any:
        """Workers join as ranks rank_offset..; `join_sender()` joins rank 0 meanwhile and is returned."""
        thread, _ = self._rpc("init_weight_sync", (host, port, rank_offset, world))
        group = join_sender()
        thread.join()
        return group

    def handoff(self, group: Any, weights: Iterable[tuple[str, Any]]) -> dict[str, float]:
        """Send `weights` from the learner's group (rank 0) into every worker; drop the prefix cache."""
        thread, out = self._rpc("receive_weights")
        stats = group.send(weights)
        thread.join()
        self.llm.reset_prefix_cache()
        stats["sync_workers"] = len(out[0]) if out else 0
        return stats

    def handoff_ipc(self, handles: list[tuple[str, Any]]) -> int:
        loaded = self.llm.collective_rpc("load_ipc_weights", args=(handles,))
        self.llm.reset_prefix_cache()
        return sum(loaded)
