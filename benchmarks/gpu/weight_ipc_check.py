"""python benchmarks/gpu/weight_ipc_check.py

The colocated weight hand-off on one GPU: this process holds "learner" weights, a second process
(an engine on the same GPU) opens their CUDA IPC handles (`mirl.training.scale.weight_sync`) and
copies them; the copies must equal the originals bit for bit, and a change the learner makes
afterwards must show through the still-open views (they are the learner's memory, not copies).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def engine(handles, results, changed, done) -> None:
    import torch

    from mirl.training.scale.weight_sync import open_ipc_handles

    views = open_ipc_handles(handles, device=0)
    results.put({k: v.clone().cpu() for k, v in views.items()})
    changed.wait(120)  # the learner changes its weights meanwhile
    torch.cuda.synchronize()
    results.put({k: v.cpu() for k, v in views.items()})
    done.wait(120)  # CPU tensors travel as shared memory this process must keep until they are read


def main() -> int:
    import torch
    import torch.multiprocessing as mp

    from mirl.training.scale.weight_sync import ipc_handles

    torch.manual_seed(0)
    weights = {"a.weight": torch.randn(256, 128, device="cuda", dtype=torch.bfloat16),
               "b.bias": torch.randn(4096, device="cuda")}
    original = {k: v.cpu() for k, v in weights.items()}
    ctx = mp.get_context("spawn")
    results, changed, done = ctx.Queue(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=engine, args=(ipc_handles(weights.items()), results, changed, done))
    proc.start()
    copies = {k: v.clone() for k, v in results.get(timeout=120).items()}
    for t in weights.values():
        t.add_(1.0)
    torch.cuda.synchronize()
    changed.set()
    seen = {k: v.clone() for k, v in results.get(timeout=120).items()}
    done.set()
    proc.join(timeout=60)
    same = all(torch.equal(copies[k], original[k]) for k in weights)
    live = all(torch.equal(seen[k], v.cpu()) for k, v in weights.items())
    print({"copies_equal": same, "views_follow_the_learner": live})
    return 0 if same and live else 1


if __name__ == "__main__":
    sys.exit(main())
