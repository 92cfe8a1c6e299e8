"""Bad inputs: each file of the corpus in `bad_inputs/` gets one clear error that names the file and the
problem, and a stored run it was given to is left byte for byte as it was.

The corpus holds malformed params files, task directories, trajectory files, taxonomy versions and
labels, edit lists and checkpoint states. Trajectory and taxonomy files are put in place of a stored
run's own and read by the next stage (prefixes); edit lists are given to the taxonomy stage of the
stored run; params files and task directories are loaded as `mirl run` and `mirl tasks` load them.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mirl.params import make

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "bad_inputs"
sys.path.insert(0, str(HERE.parents[0] / "agent"))  # agent_doubles

# case -> (where it goes in the stored run, or None: given as it is), a fragment of the problem's wording
CASES = {
    "params/wrong_type.yaml": (None, "profiling.seeds: must be an integer, got 'two'"),
    "params/unknown_key.yaml": (None, "unknown parameter(s) profiling.seedz"),
    "params/unknown_section.yaml": (None, "profilling"),
    "params/not_yaml.yaml": (None, "not valid YAML"),
    "params/not_a_mapping.yaml": (None, "must be a mapping of section names"),
    "params/role_not_a_mapping.yaml": (None, "models.policy: must be a mapping"),
    "params/float_for_int.yaml": (None, "profiling.workers: must be an integer, got 1.5"),
    "params/negative_max_tokens.yaml": (None, "models.policy.max_tokens: must be at least 1, got -5"),
    "params/missing.yaml": (None, "no such params file"),
    "tasks/bad_toml": (None, "task.toml: not valid TOML"),
    "tasks/wrong_type": (None, "verifier.timeout_sec: must be a number, got 'soon'"),
    "tasks/no_instruction": (None, "instruction.md: missing"),
    "trajectories/corrupt_line_inside.jsonl": ("profiling/trajectories.jsonl", "line 2 is not a JSON object"),
    "trajectories/newer_schema.jsonl": ("profiling/trajectories.jsonl", "schema 99 is not one this mirl reads"),
    "trajectories/steps_not_a_list.jsonl": ("profiling/trajectories.jsonl", "'steps' must be a list"),
    "trajectories/seed_not_an_integer.jsonl": ("profiling/trajectories.jsonl", "'seed' an integer"),
    "trajectories/not_an_object.jsonl": ("profiling/trajectories.jsonl", "line 1 is not a JSON object"),
    "trajectories/huge_line.jsonl": ("profiling/trajectories.jsonl", "line 2 is not a JSON object"),
    "taxonomy/not_yaml.yaml": ("taxonomy/versions/v001.yaml", "not valid YAML"),
    "taxonomy/types_not_a_list.yaml": ("taxonomy/versions/v001.yaml", "'types' is a list of types"),
    "taxonomy/newer_schema.yaml": ("taxonomy/versions/v001.yaml", "newer mirl (schema 99)"),
    "taxonomy/labels_types_not_a_list.jsonl": ("taxonomy/labels/v001.jsonl", "a list of type names as 'types'"),
    "edits/not_a_list.yaml": (None, "an edit list is a YAML list of mappings"),
    "edits/unknown_op.yaml": (None, "edit 0 has op 'explode'"),
    "edits/not_yaml.yaml": (None, "not valid YAML"),
    "edits/missing.yaml": (None, "no such file"),
    "checkpoints/torn_state": ("training/checkpoints/step-000001", "not JSON"),
    "checkpoints/no_step": ("training/checkpoints/step-000001", "no integer 'step'"),
}


def huge_line(path: Path) -> Path:
    """A good record, then a 24 MB line that is not JSON (generated: too big to keep in the corpus)."""
    good = (CORPUS / "trajectories" / "corrupt_line_inside.jsonl").read_text().splitlines()[0]
    with open(path, "w") as f:
        f.write(good + "\n" + '{"task": "beta", "steps": [' + "x" * (24 << 20) + "\n")
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every stored file's bytes (a stage's lock file holds nothing and is not stored data)."""
    from mirl.runner.stage import STAGE_LOCK

    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(STAGE_LOCK)}


@pytest.fixture
def stored(tmp_path):
    from tests.evaluate.rate_run import write_rate_run

    run, tasks = write_rate_run(tmp_path)
    return run.root, tasks


def consume(kind: str, case: Path, run: Path, tasks) -> None:
    """Give `case` to what reads it, as the kit does."""
    from agent_doubles import FakeSandbox

    if kind == "params":
        from mirl.params import load

        load(case)
    elif kind == "tasks":
        from mirl.tasks import load_task

        load_task(case)
    elif kind in ("trajectories", "taxonomy"):
        from mirl.prefixes.stage import run_prefixes

        run_prefixes(make(prefixes={"per_misbehavior": 2, "heldout_per_misbehavior": 1, "workers": 1}), run,
                     sandbox=FakeSandbox(), tasks=tasks, force=False, progress=False)
    elif kind == "edits":
        from mirl.taxonomy.stage import run_taxonomy

        run_taxonomy(make(taxonomy={"edits": str(case)}), run, progress=False)
    elif kind == "checkpoints":
        from mirl.training import checkpoints

        step, path = checkpoints.latest(run / "training" / "checkpoints")
        checkpoints.read_state(path)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_one_clear_error_and_nothing_stored_is_touched(name, stored, tmp_path):
    run, tasks = stored
    where, problem = CASES[name]
    kind = name.split("/")[0]
    case = CORPUS / name
    if name.endswith("huge_line.jsonl"):
        case = huge_line(tmp_path / "huge_line.jsonl")
    if where is not None:  # in place of the stored run's own file
        target = run / where
        if case.is_dir():
            shutil.copytree(case, target, dirs_exist_ok=True)
            named = target / "state.json"
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(case, target)
            named = target
    else:
        named = case
    before = snapshot(run)
    with pytest.raises(Exception) as err:
        consume(kind, case, run, tasks)
    message = str(err.value)
    # one clear error: a message for people, not a parser's or a dict's exception
    assert type(err.value).__name__ not in ("KeyError", "TypeError", "AttributeError", "JSONDecodeError",
                                            "ParserError", "ScannerError", "IndexError"), repr(err.value)
    assert str(named) in message or os.path.relpath(named) in message, message  # names the file
    assert problem in message, message  # and the problem
    assert len(message) < 2000, message  # not a dump of the input
    assert snapshot(run) == before  # nothing stored was touched (no file changed, none removed)
