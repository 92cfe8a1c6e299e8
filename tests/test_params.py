"""One params file for the pipeline: sections, dotted overrides, errors that name the key and the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirl import params as pipeline
from mirl.notebook import parameters_cell, parameters_source, sync_parameters_cell
from mirl.typed import ParamsError

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_bundled_params_files_load_whole():
    demo = pipeline.load(REPO / "params" / "demo.yaml")
    assert demo.models.policy.model == "local/smollm2" and demo.models.policy.max_tokens == 64
    assert demo.agent.max_steps == 4 and demo.profiling.workers == 12 and demo.profiling.max_tasks == 6 and demo.sandbox.backend == "auto"
    paper = pipeline.load(REPO / "params" / "paper.yaml")
    assert paper.agent.action_format == "tool" and paper.models.localizer.api_key_env == "VLLM_API_KEY"
    assert paper.profiling.localizer == "llm" and paper.models.policy.temperature == 1.0


def test_overrides_name_their_section_and_keep_types():
    p = pipeline.load(REPO / "params" / "demo.yaml",
                      ["profiling.max_tasks=3", "models.policy.temperature=1.0", "agent.action_format=tool",
                       "models.teacher.model=hosted_vllm/x", "sandbox.backend=bwrap"])
    assert p.profiling.max_tasks == 3 and p.models.policy.temperature == 1.0 and p.agent.action_format == "tool"
    assert p.models.teacher.model == "hosted_vllm/x" and p.sandbox.backend == "bwrap"
    assert p.models.policy.max_tokens == 64  # the file's other values stay


@pytest.mark.parametrize("override, named", [
    ("profiling.max_taskz=3", "profiling.max_taskz"),
    ("models.policy.temprature=1", "models.policy.temprature"),
    ("taxonomi.threshold=0.01", "taxonomi"),
    ("profiling.seeds=many", "profiling.seeds"),
    ("agent.action_format=json", "agent.action_format"),
    ("max_tasks=3", "profiling.max_tasks"),  # no section: the error suggests the right one
    ("models.stage_budget_usd={profile: 5}", "profile"),  # a budget for a stage that does not exist
])
def test_bad_overrides_are_errors_naming_the_key(override, named):
    with pytest.raises(ParamsError) as e:
        pipeline.load(REPO / "params" / "demo.yaml", [override])
    assert named in str(e.value)


def test_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiling:\n  seeds: two\n")
    with pytest.raises(ParamsError, match=rf"{bad}: profiling.seeds: must be an integer"):
        pipeline.load(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ParamsError, match=str(bad)):
        pipeline.load(bad)
    with pytest.raises(ParamsError, match="no such params file"):
        pipeline.load(tmp_path / "nope.yaml")


def test_a_params_file_that_is_no_yaml_text_is_an_error_naming_it(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x98\xff\xfeprofiling: {}\n")
    with pytest.raises(ParamsError, match=rf"{binary}: not a text file"):
        pipeline.load(binary)
    with pytest.raises(ParamsError, match=rf"{tmp_path}: a directory, not a params file"):
        pipeline.load(tmp_path)


def test_an_empty_params_file_is_an_error_not_the_defaults(tmp_path):
    """A truncated or wrongly copied file must not silently run every default."""
    for text in ("", "# only a comment\n"):
        empty = tmp_path / "empty.yaml"
        empty.write_text(text)
        with pytest.raises(ParamsError, match=rf"{empty}: empty \(no sections\)"):
            pipeline.load(empty)


def test_a_missing_base_names_the_file_that_says_base(tmp_path):
    """The error is in the file that names the base, not (only) in the file that is not there."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: nothere.yaml\nprofiling: {seeds: 1}\n")
    with pytest.raises(ParamsError, match=rf"{mine}: base 'nothere.yaml': no such params file"):
        pipeline.load(mine)
    from mirl import recipes

    with pytest.raises(ParamsError, match=rf"{mine}: base 'nothere.yaml': no such params file"):
        recipes.load(mine)  # `mirl batch` reads the chain for recipes first: the same message


def test_an_empty_section_in_a_file_with_a_base_keeps_the_base_section(tmp_path):
    """A section header whose keys are all commented out changes nothing, and overrides still apply."""
    (tmp_path / "base.yaml").write_text("training: {lr: 3.0e-6, steps: 7}\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: base.yaml\ntraining:\n  # lr: 1.0e-5\n")
    p = pipeline.load(mine)
    assert (p.training.lr, p.training.steps) == (3.0e-6, 7)
    assert pipeline.load(mine, ["training.steps=9"]).training.steps == 9
    alone = tmp_path / "alone.yaml"
    alone.write_text("profiling: {seeds: 2}\ntraining:\n")
    assert pipeline.load(alone, ["training.steps=9"]).training.steps == 9


def test_an_unknown_section_is_named_so_whatever_its_value():
    with pytest.raises(ParamsError, match="unknown section.s. profilng"):
        pipeline.make(profilng=3)


def test_stage_budget_comes_from_the_stage_section_under_the_stage_name():
    from mirl.profiling.stage import STAGE, ProfilingStage
    from mirl.runner.stage import stage_budgets

    p = pipeline.make(profiling={"budget_usd": 2.5})
    assert stage_budgets(p) == {"profiling": 2.5}
    assert ProfilingStage(p, "unused").llm_config().stage_budget_usd == {STAGE: 2.5}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_parameters_cell_is_generated_from_the_params_class(notebook):
    from mirl.notebook import notebook_meta

    assert parameters_cell(notebook) == parameters_source(notebook_meta(notebook)["stage"]), (
        f"{notebook.name}: parameters cell differs from its params class; "
        f"run `python -m mirl.notebook --sync {notebook.relative_to(REPO)}`")


def test_sync_rewrites_a_stale_parameters_cell(tmp_path):
    import json

    nb = json.loads(NOTEBOOKS[0].read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    cell["source"] = ["seeds = 2\n"]
    stale = tmp_path / NOTEBOOKS[0].name
    stale.write_text(json.dumps(nb))
    assert sync_parameters_cell(stale) is True
    assert parameters_cell(stale) == parameters_source("profiling")
    assert sync_parameters_cell(stale) is False
    from mirl.notebook import main

    (tmp_path / "notes.ipynb").write_text("not json")
    for bad in ([str(stale), str(tmp_path / "03_prefixes.ipynb")], [str(tmp_path / "notes.ipynb")]):
        cell["source"] = ["seeds = 2\n"]
        stale.write_text(json.dumps(nb))
        with pytest.raises(SystemExit) as e:  # a misspelt or foreign notebook is named, not a traceback
            main(["--sync", *bad])
        assert e.value.code == 2
        assert parameters_cell(stale) == "seeds = 2\n"  # and nothing was rewritten before the error


def test_notebook_params_rebuild_the_same_typed_object():
    from mirl.notebook import RunSpec, notebook_params, resolve_parameters

    spec = RunSpec(notebook=NOTEBOOKS[0], params_file=REPO / "params" / "demo.yaml",
                   overrides={"profiling.seeds": 1, "models.policy.temperature": 0.2})
    flat, typed = resolve_parameters(spec)
    assert flat["seeds"] == 1 and flat["models"]["policy"]["temperature"] == 0.2
    rebuilt = notebook_params(flat, "profiling")
    for section in ("models", "sandbox", "agent", "profiling"):  # a notebook holds its own section only
        assert getattr(rebuilt, section) == getattr(typed, section), section


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "mirl", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_cli_rejects_bad_overrides_naming_the_key(tmp_path):
    r = cli("run", "notebooks/01_profiling.ipynb", "--params", "params/demo.yaml", "--check",
            "-p", "profiling.sedes=1")
    assert r.returncode == 2 and "profiling.sedes" in r.stderr
    r = cli("run", "notebooks/01_profiling.ipynb", "--params", "params/demo.yaml", "--check",
            "-p", "profiling.seeds=1", "-p", "models.policy.temperature=1.0")
    assert r.returncode == 0, r.stderr
    r = cli("rollout", "--params", "params/demo.yaml", "--tasks", "tasks/count-lines", "--out", str(tmp_path),
            "-p", "agent.max_stepz=2")
    assert r.returncode == 2 and "agent.max_stepz" in r.stderr


def test_cli_errors_name_the_file_they_are_in_and_never_a_traceback(tmp_path):
    loop_a, loop_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    loop_a.write_text("base: b.yaml\n")
    loop_b.write_text("base: a.yaml\n")
    r = cli("run", "notebooks/01_profiling.ipynb", "--params", str(loop_a), "--check")
    assert r.returncode == 2 and r.stderr.startswith(f"error: {loop_b}: base 'a.yaml' leads back"), r.stderr
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x98\xff\xfe\n")
    for args in (("train", "--params", str(binary), "--check"), ("train", "--params", str(tmp_path), "--check"),
                 ("batch", "--params", str(binary), "--name", "x", "--check")):
        r = cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("error: "), r.stderr
    not_a_notebook = tmp_path / "01_x.ipynb"
    not_a_notebook.write_text("# not JSON\n")
    r = cli("run", str(not_a_notebook), "--params", "params/demo.yaml", "--check")
    assert r.returncode == 2 and f"error: {not_a_notebook}: not a Jupyter notebook" in r.stderr, r.stderr
    r = cli("batch", "--params", "params/demo.yaml", "--notebooks", str(tmp_path), "--check")
    assert r.returncode == 2 and f"error: {not_a_notebook}: not a Jupyter notebook" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rollout_reads_the_pipeline_params_file(tmp_path):
    """`mirl rollout --params params/demo.yaml` plays with the file's models, agent and sandbox sections,
    overridden by -p; the run remembers them and refuses a resume with another policy setting."""
    from mirl.sandbox import bwrap_backend
    from tests.real import missing

    if not bwrap_backend.available():
        missing("bubblewrap or the base root filesystem")
    out = tmp_path / "run"
    args = ["rollout", "--params", "params/demo.yaml", "--tasks", "tasks/count-lines", "--seeds", "1",
            "--sandbox", "bwrap", "--out", str(out), "--no-progress", "-p", "agent.max_steps=1",
            "-p", "models.policy.max_tokens=16"]
    r = cli(*args, timeout=280)
    assert r.returncode == 0, r.stderr
    [t] = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert t["models"]["policy"] == "local/smollm2" and len(t["steps"]) == 1
    assert t["steps"][0]["output_tokens"] <= 16
    stored = json.loads((out / "params.json").read_text())["fingerprint"]
    assert stored["models.policy.max_tokens"] == 16 and stored["models.policy.temperature"] == 0.7
    again = cli(*args[:-1], "models.policy.max_tokens=24", timeout=280)
    assert again.returncode == 2 and "models.policy.max_tokens: 16 -> 24" in again.stderr


@pytest.mark.parametrize("override, message", [
    ("profiling.seeds=-3", "profiling.seeds: must be at least 1, got -3"),
    ("profiling.workers=0", "profiling.workers: must be at least 1, got 0"),
    ("taxonomy.workers=-3", "taxonomy.workers: must be at least 1, got -3"),
    ("taxonomy.threshold=1.5", "taxonomy.threshold: must be at least 0 and at most 1, got 1.5"),
    ("training.group_size=1", "training.group_size: must be at least 2, got 1"),
    ("training.lr=0", "training.lr: must be above 0, got 0.0"),
    ("misbehavior_rate.top_p=1.5", "misbehavior_rate.top_p: must be above 0 and at most 1, got 1.5"),
    ("models.policy.top_p=0", "models.policy.top_p: must be above 0 and at most 1, got 0.0"),
    ("models.teacher.max_tokens=0",
     "models.teacher.max_tokens: must be at least 1, got 0"),
    ("models.stage_budget_usd={profiling: -1}", "models.stage_budget_usd['profiling']: must be at least 0, got -1.0"),
    ("agent.command_timeout_s=0", "agent.command_timeout_s: must be above 0, got 0.0"),
    ("sandbox.command_timeout_s=-1", "sandbox.command_timeout_s: must be above 0, got -1.0"),
])
def test_a_value_out_of_range_is_an_error_naming_key_value_and_range(override, message):
    with pytest.raises(ParamsError) as e:
        pipeline.load(REPO / "params" / "demo.yaml", [override])
    assert str(e.value) == f"{REPO / 'params' / 'demo.yaml'}: {message}"


@pytest.mark.parametrize("override", [
    "profiling.max_tasks=0",  # 0 = all
    "profiling.budget_usd=0",  # 0 = no cap
    "prefixes.per_misbehavior=0",  # held-out prefixes only
    "agent.max_response_tokens=0",  # 0 = no cap
    "models.policy.temperature=0",  # greedy
    "models.policy.top_p=1",
    "training.temperature=0",
])
def test_a_zero_or_edge_value_with_a_meaning_is_kept(override):
    pipeline.load(REPO / "params" / "demo.yaml", [override])


def test_every_bundled_params_file_loads_and_every_default_is_in_its_range():
    from mirl import recipes
    from mirl.agent.rollout import RolloutConfig
    from mirl.typed import BOUNDS, check_ranges

    files = sorted((REPO / "params").rglob("*.yaml"))
    assert len(files) > 10
    for f in files:
        if f.name == "paper_reported.yaml":  # a paper's reported numbers, not a params file
            continue
        pipeline.load(f)
        for r in recipes.load(f):
            pipeline.load(r.params_file)
    check_ranges(pipeline.Params())
    check_ranges(RolloutConfig())
    for section in pipeline.sections():  # a range key misspelled would be silently ignored
        cls = pipeline.section_class(section)
        for f in _fields_deep(cls):
            assert set(f.metadata) <= {"help", *BOUNDS}, (cls.__name__, f.name, set(f.metadata))


def _fields_deep(cls):
    import dataclasses

    for f in dataclasses.fields(cls):
        yield f
        if isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory):
            yield from _fields_deep(f.default_factory)


def test_params_made_in_code_are_checked_when_a_stage_is_made(tmp_path):
    from mirl.profiling.stage import ProfilingStage

    p = pipeline.make()
    p.profiling.seeds = -3
    with pytest.raises(ParamsError, match=r"^profiling\.seeds: must be at least 1, got -3$"):
        ProfilingStage(p, tmp_path / "run")
