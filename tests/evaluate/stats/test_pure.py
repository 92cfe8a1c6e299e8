"""The evaluation statistics are pure: importing every module of mirl.evaluate.stats pulls in no other
mirl module (no stage, model client or sandbox), so they run on plain records anywhere."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.test_layers import REPO


def test_the_statistics_pull_in_no_other_mirl_module():
    code = ("import sys, json, importlib, pkgutil, mirl.evaluate.stats as m\n"
            "for info in pkgutil.walk_packages(m.__path__, m.__name__ + '.'):\n"
            "    importlib.import_module(info.name)\n"
            "print(json.dumps(sorted(n for n in sys.modules if n.startswith('mirl.'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "mirl.evaluate.stats.rates" in loaded  # the walk saw the modules
    assert [n for n in loaded if n != "mirl.evaluate" and not n.startswith("mirl.evaluate.stats")] == []
