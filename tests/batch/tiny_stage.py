"""A tiny stage on the real runner, for synthetic stage notebooks that `mirl batch` runs in tests.

The notebook calls `run(globals(), stage)`: `items` items (each sleeps `delay` s, appends `start i` and
`done i` to `<run>/calls.log`), fingerprinted by the stage's params the batch injected. While the file
`<run>/hold` exists, item `hold_at` waits, so a test can kill the batch there. With `meet=n`, item 0 waits
(up to `meet_s` seconds, then fails) until n runs beside each other (the recipes' runs under one
`recipes/` directory) have started theirs: n trainings running at once.
"""

from __future__ import annotations

import time
from pathlib import Path

from mirl import plotstyle
from mirl.notebook import RESERVED, run_dirs
from mirl.runner.stage import Stage, keyed, run_stage


class TinyStage(Stage):
    records = "records.jsonl"
    key_fields = ("i",)

    def __init__(self, name: str, settings: dict, run_dir: Path, items: int, delay: float, hold_at: int,
                 meet: int = 0, meet_s: float = 60.0):
        super().__init__(None, run_dir)
        self.name, self.settings, self.items, self.delay, self.hold_at = name, settings, items, delay, hold_at
        self.meet, self.meet_s = meet, meet_s

    def fingerprint(self):
        return {"settings": self.settings, "items": self.items}

    def plan(self):
        return keyed(((i,), i) for i in range(self.items))

    def _log(self, text: str) -> None:
        with open(self.run.root / "calls.log", "a") as f:
            f.write(f"{self.name} {text}\n")

    def _meet(self) -> None:
        here = self.run.root.parent / "met"
        here.mkdir(exist_ok=True)
        (here / self.run.root.name).touch()
        deadline = time.monotonic() + self.meet_s
        while len(list(here.iterdir())) < self.meet:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.run.root.name}: met {len(list(here.iterdir()))} of {self.meet} runs")
            time.sleep(0.05)

    def run_item(self, i):
        self._log(f"start {i}")
        if self.meet and i == 0:
            self._meet()
        while i == self.hold_at and (self.run.root / "hold").exists():
            time.sleep(0.05)
        time.sleep(self.delay)
        self._log(f"done {i}")
        return {"i": i, "square": i * i}

    def progress(self, record):
        return {"last": record["i"]}

    def finalize(self, records):
        return {"sum_of_squares": sum(r["square"] for r in records)}


def run(namespace: dict, stage: str, items: int = 3, delay: float = 0.0, hold_at: int = -1,
        reads: tuple[str, ...] = (), figure: bool = False, meet: int = 0, meet_s: float = 60.0) -> dict:
    run_dir, reports = run_dirs(namespace)
    settings = {k: v for k, v in namespace.items()
                if not k.startswith("_") and k not in RESERVED and isinstance(v, (int, float, str, bool, dict, list))
                and k not in ("In", "Out")}
    s = TinyStage(stage, settings, run_dir, items, delay, hold_at, meet, meet_s)
    s.reads = reads
    summary = run_stage(s, force=bool(namespace.get("force")))
    if figure:
        import matplotlib.pyplot as plt
        import pandas as pd

        df = pd.DataFrame(s.load_records()).sort_values("i")
        df.to_csv(reports / f"{stage}_squares.csv", index=False)
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot(df["i"], df["square"], marker="o")
        ax.set(title=f"{stage}: squares", xlabel="i", ylabel="i²")
        plotstyle.save(fig, reports, f"{stage}_squares")
        plt.close(fig)
    return summary
