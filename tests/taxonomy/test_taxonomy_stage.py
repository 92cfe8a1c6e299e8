"""The taxonomy stage end to end: on profiling output (offline), with an LLM annotator through the
client (scripted replies), resumed, and with an edit list as a new version."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from agent_doubles import FakeSandbox

from mirl.llm.scripted import ScriptedModel, register, unregister
from mirl.params import make
from mirl.profiling.stage import run_profiling
from mirl.records import ErrorStep, load_error_steps
from mirl.records.taxonomy import TaxonomyStore
from mirl.tasks import load_task
from mirl.taxonomy.stage import run_taxonomy

REPO = Path(__file__).resolve().parents[2]
REPLIES = ["Let me look.\n```bash\nls -la\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


@pytest.fixture
def profiled(tmp_path):
    tasks = [load_task(REPO / "tasks" / t) for t in ("count-lines", "fix-permissions")]
    p = make(profiling={"seeds": 2, "workers": 2}, agent={"max_steps": 5})
    run_profiling(p, tmp_path, tasks=tasks, sandbox=FakeSandbox(), policy=ScriptedModel(REPLIES, cycle=True),
                  progress=False)
    return tmp_path


def test_offline_taxonomy_on_profiling_output(profiled):
    steps = load_error_steps(profiled)
    assert steps
    s = run_taxonomy(make(), profiled, progress=False)
    assert s["version"] == 1 and s["error_steps"] == len(steps) and s["unassigned"] == 0
    store = TaxonomyStore(profiled / "taxonomy")
    tax, labels = store.load(1), store.load_labels(1)
    assert {lb.id for lb in labels} == {x.id for x in steps}
    # every flag came from a rule detector: each rule is a type of its own, on exactly the steps it flagged
    by_rule = {}
    for x in steps:
        by_rule.setdefault(x.source.split(":", 1)[1].replace("-", " "), set()).add(x.id)
    assert set(by_rule) == {"no runnable command", "submit without check"}
    for name, ids in by_rule.items():
        assert {lb.id for lb in labels if name in lb.types} == ids and tax.get(name).status == "kept"
    assert s["union_coverage"] == 1.0 and set(by_rule) <= set(s["kept"])
    stats = (profiled / "taxonomy" / "stats.csv").read_text()
    assert "no runnable command" in stats
    again = run_taxonomy(make(), profiled, progress=False)
    assert again["version"] == 1 and store.versions() == [1]  # a resumed run does not add a version


def test_edit_list_makes_a_new_version_and_keeps_the_old(profiled, tmp_path):
    run_taxonomy(make(), profiled, progress=False)
    store = TaxonomyStore(profiled / "taxonomy")
    edits = tmp_path / "edits.yaml"
    edits.write_text(yaml.safe_dump([{"op": "rename", "type": "no runnable command", "to": "replies without command"},
                                     {"op": "long_tail", "type": "replies without command"}]))
    s = run_taxonomy(make(taxonomy={"edits": str(edits)}), profiled, progress=False)
    assert s["version"] == 2 and store.versions() == [1, 2]
    v1, v2 = store.load(1), store.load(2)
    assert "no runnable command" in v1.names() and "replies without command" in v2.names()
    assert v2.parent == 1 and v2.get("replies without command").status == "long_tail"
    renamed = {lb.id for lb in store.load_labels(1) if "no runnable command" in lb.types}
    assert renamed and {lb.id for lb in store.load_labels(2) if "replies without command" in lb.types} == renamed
    # the first edit list again after another: saved as the latest version, which later stages read
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump([{"op": "long_tail", "type": "no runnable command"}]))
    assert run_taxonomy(make(taxonomy={"edits": str(other)}), profiled, progress=False)["version"] == 3
    s = run_taxonomy(make(taxonomy={"edits": str(edits)}), profiled, progress=False)
    assert s["version"] == store.versions()[-1] == 4 and "replies without command" in store.load(4).names()
    # and no edit list after edits: the unedited taxonomy is the latest again
    assert run_taxonomy(make(), profiled, progress=False)["version"] == store.versions()[-1] == 5
    assert "no runnable command" in store.load(5).names()
    bad = tmp_path / "bad.yaml"
    bad.write_text("op: rename\n")
    with pytest.raises(ValueError, match="edit list is a YAML list"):
        run_taxonomy(make(taxonomy={"edits": str(bad)}), profiled, progress=False)


def annotator_replies(messages):
    """A scripted annotator: reads the example ids from the prompt and answers in the asked format."""
    prompt = messages[-1]["content"]
    ids = re.findall(r'\{"id": "([^"]+)"', prompt.split("These are the error types so far", 1)[-1])
    if prompt.startswith("Propose"):
        return json.dumps({"types": [{"name": "acts without looking", "definition": "acts on unseen data; not a repeat",
                                      "example_ids": ids[:-1]}],
                           "unassigned": [{"id": ids[-1], "reason": "new_pattern"}]})
    if prompt.startswith("These are the error types"):
        return json.dumps({"assignments": [{"id": i, "types": ["acts without looking"]} for i in ids],
                           "unassigned": [], "new_types": []})
    listed = prompt.split("\n\n")[-2]  # the examples block of a label prompt
    ids = re.findall(r'^\{"id": "([^"]+)"', listed, flags=re.M)
    return json.dumps({"assignments": [{"id": i, "types": ["acts without looking"]} for i in ids[1:]],
                       "unassigned": [{"id": ids[0], "reason": "one_off"}]})


def test_llm_annotator_through_the_client(tmp_path):
    steps = [ErrorStep(env=f"env{i % 3}", seed=0, step=i, rejected_command=f"cmd {i}", reason=f"reason {i}")
             for i in range(9)]
    path = tmp_path / "error_steps.jsonl"
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in steps))
    model = ScriptedModel(annotator_replies, name="annotator-stage")
    try:
        p = make(taxonomy={"annotator": "llm", "error_steps": str(path), "batch_size": 4, "label_batch_size": 4,
                           "threshold": 0.5}, models={"annotator": {"model": register(model)}})
        s = run_taxonomy(p, tmp_path / "run", progress=False)
        calls = len(model.calls)
        again = run_taxonomy(p, tmp_path / "run", progress=False)
    finally:
        unregister("annotator-stage")
    assert s["version"] == 1 and s["kept"] == ["acts without looking"]
    # propose (4), refine (4, stops: no new_pattern), then 3 labelling batches of 4, 4, 1
    assert calls == 1 + 1 + 3
    assert len(model.calls) == calls and again["version"] == 1  # resumed: nothing asked again
    labels = TaxonomyStore(tmp_path / "run" / "taxonomy").load_labels(1)
    assert len(labels) == 9 and sum(1 for lb in labels if lb.unassigned == "one_off") == 3
    assert s["union_coverage"] == round(6 / 9, 4)
    assert s["llm"]["annotator"]["calls"] == 5


def recurring_replies(messages):
    """Batch 0 proposes two types; the refine batch assigns only the first again and proposes a third."""
    prompt = messages[-1]["content"]
    ids = re.findall(r'\{"id": "([^"]+)"', prompt.split("These are the error types so far", 1)[-1])
    if prompt.startswith("Propose"):
        return json.dumps({"types": [{"name": "acts without looking", "definition": "acts on unseen data",
                                      "example_ids": ids[:2]},
                                     {"name": "guesses a path", "definition": "uses a path never listed",
                                      "example_ids": ids[2:]}], "unassigned": []})
    if prompt.startswith("These are the error types"):
        return json.dumps({"assignments": [{"id": i, "types": ["acts without looking"]} for i in ids[:2]],
                           "unassigned": [{"id": i, "reason": "new_pattern"} for i in ids[2:]],
                           "new_types": [{"name": "repeats a failure", "definition": "runs it again unchanged",
                                          "example_ids": ids[2:]}]})
    listed = prompt.split("\n\n")[-2]
    ids = re.findall(r'^\{"id": "([^"]+)"', listed, flags=re.M)
    return json.dumps({"assignments": [{"id": i, "types": ["acts without looking"]} for i in ids], "unassigned": []})


@pytest.mark.parametrize("recur, kept", [(2, ["acts without looking"]),
                                         (1, ["acts without looking", "guesses a path", "repeats a failure"])])
def test_llm_candidates_are_the_types_that_recur_across_batches(tmp_path, recur, kept):
    """Only a type proposed or assigned in at least `recur_batches` batches becomes a candidate (paper 3.3):
    one proposed in batch 0 and never seen again, or first proposed in the last refine batch, does not."""
    steps = [ErrorStep(env=f"env{i % 3}", seed=0, step=i, rejected_command=f"cmd {i}", reason=f"reason {i}")
             for i in range(8)]
    path = tmp_path / "error_steps.jsonl"
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in steps))
    model = ScriptedModel(recurring_replies, name="annotator-recur")
    try:
        p = make(taxonomy={"annotator": "llm", "error_steps": str(path), "batch_size": 4, "label_batch_size": 8,
                           "refine_batches": 1, "recur_batches": recur, "new_pattern_stop": 0.0},
                 models={"annotator": {"model": register(model)}})
        run_taxonomy(p, tmp_path / "run", progress=False)
    finally:
        unregister("annotator-recur")
    candidates = yaml.safe_load((tmp_path / "run" / "taxonomy" / "candidates.yaml").read_text())
    assert [t["name"] for t in candidates["types"]] == kept
    label_prompt = model.calls[-1][-1]["content"]
    assert ("guesses a path" in label_prompt) == (recur == 1)
    assert "in batch(es) 0, 1" in candidates["types"][0]["provenance"]
