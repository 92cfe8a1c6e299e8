"""The stage progress object: tqdm's bar without MIRL_PROGRESS (JupyterLab, a terminal), only the
throttled progress file under `mirl batch` (MIRL_PROGRESS=file)."""

from __future__ import annotations

import json

from mirl.runner import progress as progress_mod
from mirl.runner.progress import ENV, Progress


def test_bar_without_the_variable_file_only_with_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ENV, raising=False)
    bar = Progress(total=3, desc="taxonomy", unit="item", path=tmp_path / "a.json")
    for i in range(3):
        bar.update(1)
        bar.set_postfix({"flags": i})
    bar.close()
    assert "3/3" in capsys.readouterr().err  # tqdm drew its bar
    assert json.loads((tmp_path / "a.json").read_text())["done"] == 3

    monkeypatch.setenv(ENV, "file")
    bar = Progress(total=3, desc="taxonomy", unit="item", path=tmp_path / "b.json")
    for i in range(3):
        bar.update(1)
        bar.set_postfix({"flags": i, "reward": 0.123456789})
    bar.close()
    assert capsys.readouterr().err == ""  # no bar in the cell's output
    state = json.loads((tmp_path / "b.json").read_text())
    assert (state["desc"], state["unit"], state["done"], state["total"], state["finished"]) == ("taxonomy", "item", 3, 3, True)
    assert state["fields"] == {"flags": 2, "reward": 0.1235} and state["eta_s"] == 0.0 and state["rate"] > 0


def test_file_writes_are_throttled_but_the_last_state_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "file")
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    writes = []
    real = progress_mod.atomic_write_json
    monkeypatch.setattr(progress_mod, "atomic_write_json", lambda p, v: (writes.append(v["done"]), real(p, v)))
    bar = Progress(total=500, desc="training", unit="step", path=tmp_path / "p.json", initial=100)
    for _ in range(400):  # one update every 0.25 s: a write at most once a second, so every 4th
        now[0] += 0.25
        bar.update(1)
    bar.close()
    assert writes == [100, *range(104, 501, 4), 500]
    state = json.loads((tmp_path / "p.json").read_text())
    assert (state["done"], state["rate"], state["eta_s"]) == (500, 4.0, 0.0)
