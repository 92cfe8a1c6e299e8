"""Checkpoints: atomic writes, torn ones ignored, pruning, and the paper's selection by smoothed reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.training import checkpoints as ck


def test_save_is_atomic_and_torn_writes_are_ignored(tmp_path):
    root = tmp_path / "checkpoints"
    ck.save(root, 2, lambda d: (d / "w.bin").write_text("2"), {"draws": 4})
    (root / "step-000005").mkdir()  # a directory without state.json: a torn write by another path
    (root / ".tmp-zzz").mkdir()
    assert [s for s, _ in ck.list_checkpoints(root)] == [2]
    assert ck.read_state(ck.latest(root)[1]) == {"draws": 4, "step": 2}

    def fails(d):
        (d / "w.bin").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        ck.save(root, 3, fails, {"draws": 6})
    assert [s for s, _ in ck.list_checkpoints(root)] == [2]
    assert not list(root.glob(".tmp-*"))  # the failed write left nothing behind, and the old torn one went


def test_saving_a_step_again_never_leaves_a_state_beside_missing_weights(tmp_path, monkeypatch):
    """A kill while the earlier copy of the step is deleted (here: the delete stops after the weights)
    leaves either copy whole, never a state.json without its weights."""
    root = tmp_path / "checkpoints"
    ck.save(root, 2, lambda d: (d / "w.bin").write_text("old"), {"draws": 4})
    real = ck.shutil.rmtree

    def killed_mid_delete(path, *a, **k):
        for w in Path(path).rglob("w.bin"):
            w.unlink()
        raise KeyboardInterrupt  # as a kill would stop it

    monkeypatch.setattr(ck.shutil, "rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        ck.save(root, 2, lambda d: (d / "w.bin").write_text("new"), {"draws": 8})
    monkeypatch.setattr(ck.shutil, "rmtree", real)
    for _, d in ck.list_checkpoints(root):
        assert (d / "w.bin").exists(), f"{d} has a state.json but no weights"
    assert [(s, (d / "w.bin").read_text()) for s, d in ck.list_checkpoints(root)] == [(2, "new")]
    ck.save(root, 3, lambda d: (d / "w.bin").write_text("3"), {"draws": 9})
    assert not list(root.glob(".tmp-*"))  # the next save sweeps what the kill left


def test_a_kill_between_the_two_renames_of_a_save_loses_no_checkpoint(tmp_path, monkeypatch):
    """Killed after the earlier copy was moved aside and before the new one took its name: the sweep
    before the next resume puts the earlier copy back; a failed rename puts it back at once."""
    root = tmp_path / "checkpoints"
    ck.save(root, 2, lambda d: (d / "w.bin").write_text("old"), {"draws": 4})
    real = Path.rename

    def killed(self, target):
        if Path(target).name == "step-000002" and self.name.startswith(".tmp-") and not self.name.startswith(".tmp-old"):
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        ck.save(root, 2, lambda d: (d / "w.bin").write_text("new"), {"draws": 8})
    monkeypatch.setattr(Path, "rename", real)
    assert [(s, (d / "w.bin").read_text()) for s, d in ck.list_checkpoints(root)] == [(2, "old")]
    # a kill (no except clause runs) leaves the copy aside: the sweep brings it back
    aside = ck._aside(root, ck.checkpoint_dir(root, 2))
    assert ck.list_checkpoints(root) == [] and aside.exists()
    ck.sweep(root)
    assert [(s, (d / "w.bin").read_text()) for s, d in ck.list_checkpoints(root)] == [(2, "old")]
    assert not list(root.glob(".tmp-*"))


def test_prune_keeps_the_newest_and_protected(tmp_path):
    root = tmp_path / "c"
    for s in (1, 2, 3, 4):
        ck.save(root, s, lambda d: None, {})
    assert ck.prune(root, 0) == []
    assert ck.prune(root, 2, protect=[1]) == [2]
    assert [s for s, _ in ck.list_checkpoints(root)] == [1, 3, 4]


def test_only_the_newest_checkpoint_keeps_the_optimizer_state(tmp_path):
    root = tmp_path / "c"

    def write(d):
        (d / "model.safetensors").write_text("w")
        (d / "optimizer.pt").write_text("adam")  # the embedded learner's state
        (d / "zero").mkdir()  # DeepSpeed's partitioned state
        (d / "zero" / "rank0.pt").write_text("part")

    for s in (1, 2, 3):
        ck.save(root, s, write, {})
    assert ck.drop_resume_state(root, 3) == [1, 2]
    for s, d in ck.list_checkpoints(root):
        assert (d / "model.safetensors").exists()  # selection and evaluation still read every step's weights
        assert (d / "optimizer.pt").exists() == (d / "zero").exists() == (s == 3)
    assert not list(root.glob(".tmp-*"))  # what was moved aside is gone
    assert ck.drop_resume_state(root, 3) == []


def test_a_training_save_leaves_the_optimizer_state_in_the_newest_checkpoint_alone(tmp_path):
    from types import SimpleNamespace

    from mirl.training.stage import save_checkpoint

    class Engine:
        def save(self, d):
            (d / "model.safetensors").write_text("w")
            (d / "optimizer.pt").write_text("adam")

    stage = SimpleNamespace(params=SimpleNamespace(training=SimpleNamespace(recipe="mirl", keep_checkpoints=0)),
                            checkpoints=tmp_path / "c")
    for step in (1, 2, 3):
        save_checkpoint(stage, Engine(), step, draws=step, digest="d")
    assert [(s, (d / "optimizer.pt").exists()) for s, d in ck.list_checkpoints(stage.checkpoints)] == [
        (1, False), (2, False), (3, True)]


def test_pruning_spares_the_checkpoints_the_selection_would_pick(tmp_path):
    """keep_checkpoints keeps the newest N besides the top by smoothed reward: pruning those first
    would leave the selection only the newest to choose from."""
    import json
    from types import SimpleNamespace

    from mirl.training.stage import save_checkpoint

    class Engine:
        def save(self, d):
            (d / "model.safetensors").write_text("w")

    t = SimpleNamespace(recipe="mirl", keep_checkpoints=2, select_top=2, smoothing=1)
    stage = SimpleNamespace(params=SimpleNamespace(training=t), checkpoints=tmp_path / "c", out=tmp_path)
    rewards = {1: 0.1, 2: 0.9, 3: 0.7, 4: 0.0, 5: 0.1, 6: 0.2}
    for step, r in rewards.items():
        with (tmp_path / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, "reward": r}) + "\n")
        save_checkpoint(stage, Engine(), step, draws=step, digest="d")
    assert [s for s, _ in ck.list_checkpoints(stage.checkpoints)] == [2, 3, 5, 6]


def test_a_kill_in_the_middle_of_dropping_a_state_directory_leaves_the_checkpoint_whole(tmp_path):
    root = tmp_path / "c"
    ck.save(root, 1, lambda d: ((d / "model.safetensors").write_text("w"), (d / "zero").mkdir()), {})
    ck.save(root, 2, lambda d: (d / "model.safetensors").write_text("w"), {})
    ck._aside(root, root / "step-000001" / "zero")  # killed after the rename aside, before the removal
    ck.sweep(root)  # what the next save or resume does first
    assert [s for s, _ in ck.list_checkpoints(root)] == [1, 2] and not list(root.glob(".tmp-*"))
    assert (root / "step-000001" / "model.safetensors").exists() and not (root / "step-000001" / "zero").exists()


def test_selection_ranks_checkpoints_by_the_smoothed_training_reward():
    assert ck.smoothed([1, 0, 1, 1], 2) == [1.0, 0.5, 0.5, 1.0]
    rewards = [0.0, 1.0, 0.0, 0.2, 0.4, 0.6]
    metrics = [{"step": i + 1, "reward": r} for i, r in enumerate(rewards)] + [{"step": 7, "reward": None}]
    # window 3, by hand: step 2 -> 0.5, step 4 -> 0.4, step 6 -> 0.4; the tie goes to the later step
    top = ck.top_by_reward(metrics, [2, 4, 6], top=2, window=3)
    assert [t["step"] for t in top] == [2, 6]
    assert top[0]["smoothed_reward"] == pytest.approx(0.5) and top[1]["smoothed_reward"] == pytest.approx(0.4)
    assert ck.top_by_reward(metrics, [2], top=5, window=1) == [{"step": 2, "smoothed_reward": 1.0}]
