"""Handing the learner's new weights to the generation engines after each step.

A sync group is its own process group, apart from the learners' data-parallel one: rank 0 is the
learner that sends (rank 0 of the learners; under ZeRO-3 every learner rank joins the gathering of
each tensor, see `ZeroLearner.named_weights`), ranks 1..N are generation engines in other processes
(Ray actors, vLLM workers). It is made from a TCP store at an address every member is told, so
no member needs the others' default group: NCCL between GPUs, gloo on CPUs.

The protocol, per hand-off: for each tensor the sender broadcasts a small header (name, dtype,
shape), then the tensor; a header of None ends it. Receivers allocate from the header, so they need
no copy of the model's layout, and the learner may send a subset (keys not sent keep their values).
`receive_into(generator)` loads the result with the generator's own `update_weights`, which drops
its prefix and KV caches (`mirl.engines.generator`).

When learner and engine share a GPU (colocated), copying through a process group is wasted: the
sender hands CUDA IPC handles instead (`ipc_handles`), the engine opens them (`open_ipc_handles`)
and copies from the learner's memory directly. Handles are plain picklable tuples, sent by Ray or
any channel; they are only valid while the sender keeps the tensors alive.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                              torch.uint8, torch.bool)}


@dataclass
class SyncGroup:
    """One member of a sync group: `rank` of `world` (0 sends), over `backend` on `device`."""

    rank: int
    world: int
    backend: str
    device: torch.device
    pg: Any

    @classmethod
    def join(cls, host: str, port: int, rank: int, world: int, backend: str = "", device: str = "",
             timeout_s: float = 300.0) -> SyncGroup:
        """Join (rank 0: create) the group whose store listens at host:port; blocks until all `world` joined."""
        import torch.distributed as dist

        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dev = torch.device(device or ("cuda" if backend == "nccl" else "cpu"))
        if backend == "nccl" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        store = dist.TCPStore(host, port, world, is_master=rank == 0, timeout=timedelta(seconds=timeout_s),
                              wait_for_workers=True)
        if backend == "gloo":
            pg = dist.ProcessGroupGloo(store, rank, world, timedelta(seconds=timeout_s))
        elif backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timedelta(seconds=timeout_s)
            pg = dist.ProcessGroupNCCL(store, rank, world, opts)
        else:
            raise ValueError(f"sync group backend must be nccl or gloo, got {backend!r}")
        return cls(rank, world, backend, dev, pg)

    def _broadcast(self, t: torch.Tensor) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = 0, 0
        self.pg.broadcast([t], opts).wait()

    def _object(self, obj: Any = None) -> Any:
        """Broadcast a picklable object from rank 0 (length, then bytes); returns it on every rank."""
        data = pickle.dumps(obj) if self.rank == 0 else b""
        n = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        self._broadcast(n)
        buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device) if self.rank == 0
               else torch.empty(int(n.item()), dtype=torch.uint8, device=self.device))
        self._broadcast(buf)
        return obj if self.rank == 0 else pickle.loads(buf.cpu().numpy().tobytes())

    # --- the hand-off ---------------------------------------------------------------------------

    def send(self, weights: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Rank 0: broadcast every (name, tensor), then the end marker. Returns counts for the step log."""
        if self.rank != 0:
            raise RuntimeError(f"send is rank 0's; this is rank {self.rank}")
        tensors = nbytes = 0
        for name, t in weights:
            t = t.detach().to(self.device).contiguous()
            self._object((name, str(t.dtype), tuple(t.shape)))
            self._broadcast(t)
            tensors, nbytes = tensors + 1, nbytes + t.numel() * t.element_size()
        self._object(None)
        return {"sync_tensors": tensors, "sync_bytes": nbytes}

    def receive_each(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Ranks 1..N: (name, tensor) of one hand-off as each arrives, so a receiver can load them
        one at a time (vLLM's `load_weights`) instead of holding a second copy of the model."""
        if self.rank == 0:
            raise RuntimeError("receive is for ranks 1..N; rank 0 sends")
        while (header := self._object()) is not None:
            name, dtype, shape = header
            if dtype not in DTYPES:
                raise TypeError(f"weight {name}: dtype {dtype} cannot be received")
            t = torch.empty(shape, dtype=DTYPES[dtype], device=self.device)
            self._broadcast(t)
            yield name, t

    def receive(self, device: str | torch.device | None = None) -> dict[str, torch.Tensor]:
        """Ranks 1..N: the tensors of one hand-off by name (on `device`, default the group's)."""
        return {name: (t if device is None else t.to(device)) for name, t in self.receive_each()}

    def receive_into(self, generator: Any) -> int:
        """Receive one hand-off and load it into `generator` (its `update_weights`); returns tensors loaded."""
        dev = getattr(generator, "device", None)
        state = self.receive(device=dev)
        generator.update_weights(state)
        return len(state)


# --- colocated: CUDA IPC ------------------------------------------------------------------------


def ipc_handles(weights: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, Any]]:
    """(name, handle) per CUDA tensor: what `open_ipc_handles` rebuilds in another process on the same GPU."""
    from torch.multiprocessing.reductions import reduce_tensor

    out = []
    for name, t in weights:
        if not t.is_cuda:
            raise ValueError(f"weight {name} is on {t.device}: CUDA IPC hands over GPU tensors only")
        out.append((name, reduce_tensor(t.detach().contiguous())))
    return out


def open_ipc_handles(handles: Iterable[tuple[str, Any]], device: int | None = None) -> dict[str, torch.Tensor]:
    """The tensors behind `ipc_handles` (views of the sender's memory: copy before the sender frees them).
    `device` is this process's index of that GPU when it numbers devices differently."""
    out = {}
    for name, (rebuild, args) in handles:
        args = list(args)
        if device is not None:
            args[6] = device  # rebuild_cuda_tensor's storage_device
        out[name] = rebuild(*args)
    return out
