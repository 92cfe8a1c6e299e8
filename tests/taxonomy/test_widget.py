"""The curation widget without a browser: every operation through the UI object (its methods and its
buttons), the counts it shows, undo, and Save writing a new version with an edit list that replays."""

from __future__ import annotations

import pytest
import yaml
from curation_run import DEFINITIONS, FLAGGED, THRESHOLD, A, B, C, D, make_run

from mirl.params import make
from mirl.records.taxonomy import TaxonomyStore
from mirl.taxonomy.curation import EditError, apply_edits
from mirl.taxonomy.stage import read_edits, run_taxonomy
from mirl.taxonomy.stats import apply_threshold, type_stats
from mirl.taxonomy.widget import CurationUI, edits_path

ALL_IDS = list(FLAGGED)


@pytest.fixture
def ui(tmp_path):
    return CurationUI(make_run(tmp_path / "demo"))


def ids_of(ui, name):
    return {lb.id for lb in ui.labels if name in lb.types}


def shown_counts(ui):
    """The type list as a person reads it: name -> (steps, status), parsed from the option labels."""
    out = {}
    for label, name in ui.types_box.options:
        steps = int(label.split(" — ")[1].split(" steps")[0])
        out[name] = (steps, label.rsplit("· ", 1)[1])
    return out


def test_type_list_shows_counts_shares_and_status(ui):
    assert shown_counts(ui) == {A: (4, "kept"), B: (2, "long_tail"), C: (2, "long_tail"), D: (2, "long_tail")}
    assert ui.types_box.options[0] == (f"{A} — 4 steps (40.0%) · kept", A)  # largest share first
    assert "10 error steps · 4 types · 1 kept" in ui.header.value and "v001" in ui.header.value
    assert ui.counts() == {A: 4, B: 2, C: 2, D: 2}
    assert f"<td>{A}</td><td>4</td><td>40.0%</td><td>3</td><td>kept</td>" in ui.stats_view.value


def test_examples_search_and_detail(ui):
    assert ui.examples() == ALL_IDS
    assert ui.examples([A]) == ["count-lines/0/1", "count-lines/0/2", "fix-permissions/0/1", "parse-logs/0/1"]
    assert ui.search("submitted without") == ["count-lines/1/2", "parse-logs/0/4"]
    assert ui.search("without", types=[A]) == ["fix-permissions/0/1"]  # "opened permissions without looking"
    assert ui.search("chmod") == ["fix-permissions/0/1"]  # the command is searched too
    with pytest.raises(KeyError, match="no type named"):
        ui.examples(["no such type"])
    ui.types_box.value = (C,)
    assert [v for _, v in ui.examples_box.options] == ["count-lines/1/2", "parse-logs/0/4"]
    assert ui.definition.value == DEFINITIONS[C]
    ui.types_box.value = ()
    ui.search_box.value = "no runnable"
    assert [v for _, v in ui.examples_box.options] == ["count-lines/0/3", "fix-permissions/0/2"]
    ui.examples_box.value = ("fix-permissions/0/2",)
    assert "the reply had no runnable command" in ui.detail.value and f"types: {B}" in ui.detail.value
    assert "(no command)" in ui.detail.value


def test_prefix_on_demand(ui):
    assert [s.command for s in ui.prefix("parse-logs/0/2")] == ["ls /var/log", "grep error app.log"]
    assert ui.prefix("count-lines/1/0") == []
    ui.examples_box.value = ("parse-logs/0/2",)
    assert "grep error app.log" not in ui.detail.value  # not read until asked for
    ui.show_prefix.value = True
    assert "[1] $ grep error app.log\noutput of step 1 of parse-logs/0" in ui.detail.value
    assert "cat app.log | head" in ui.detail.value  # the rejected command itself
    ui.examples_box.value = ("count-lines/1/0",)
    assert "none (the first step)" in ui.detail.value


def test_rename_and_define_through_the_buttons(ui):
    ui.types_box.value = (A,)
    ui.new_name.value = "acts before inspecting"
    ui.buttons["rename"].click()
    assert ui.taxonomy.names()[0] == "acts before inspecting" and A not in ui.taxonomy.names()
    assert ids_of(ui, "acts before inspecting") == {"count-lines/0/1", "count-lines/0/2", "fix-permissions/0/1",
                                                    "parse-logs/0/1"}
    assert ui.types_box.value == ("acts before inspecting",)
    ui.definition.value = "uses output it never read; not a repeat"
    ui.buttons["define"].click()
    assert ui.taxonomy.get("acts before inspecting").definition == "uses output it never read; not a repeat"
    assert ui.touched() == {"count-lines/0/1", "count-lines/0/2", "fix-permissions/0/1", "parse-logs/0/1"}
    assert "4 step(s) to re-label" in ui.header.value
    assert ui.edits == [{"op": "rename", "type": A, "to": "acts before inspecting"},
                        {"op": "define", "type": "acts before inspecting",
                         "definition": "uses output it never read; not a repeat"}]
    # a bad name is shown, not raised, and changes nothing
    ui.new_name.value = "sloppy"
    ui.buttons["rename"].click()
    assert "2-5 words" in ui.status.value and len(ui.edits) == 2
    ui.types_box.value = (B, C)
    ui.buttons["rename"].click()
    assert "select exactly one type" in ui.status.value


def test_merge_by_clicking_and_by_method(ui):
    ui.types_box.value = (B, C)
    ui.new_name.value = "stops without real work"
    ui.buttons["merge"].click()
    assert ui.status.value == ""
    assert ui.taxonomy.names() == [A, "stops without real work", D]
    assert "3 types · 2 kept" in ui.header.value
    assert shown_counts(ui)["stops without real work"] == (4, "kept")  # as Save will mark it: 4/10 >= 0.25
    assert ids_of(ui, "stops without real work") == {"count-lines/0/3", "fix-permissions/0/2", "count-lines/1/2",
                                                     "parse-logs/0/4"}
    ui.undo()
    assert shown_counts(ui) == {A: (4, "kept"), B: (2, "long_tail"), C: (2, "long_tail"), D: (2, "long_tail")}
    ui.merge([A, D])  # into the first when no name is given
    assert ui.taxonomy.names() == [A, B, C]
    assert ui.counts()[A] == 5  # fix-permissions/0/1 carried both: counted once
    assert ui.edits[-2:] == [{"op": "undo"}, {"op": "merge", "types": [A, D]}]


def test_split_chosen_examples_and_move(ui):
    ui.types_box.value = (A,)
    ui.examples_box.value = ("parse-logs/0/1",)
    ui.new_name.value = "searches unlisted logs"
    ui.buttons["split"].click()
    assert ui.taxonomy.names()[:2] == [A, "searches unlisted logs"]
    assert ids_of(ui, "searches unlisted logs") == {"parse-logs/0/1"}
    assert ui.counts()[A] == 3
    assert ui.taxonomy.get("searches unlisted logs").definition.startswith(f"Split from {A}")
    assert ui.types_box.value == (A, "searches unlisted logs")
    ui.types_box.value = (D,)
    ui.examples_box.value = ("fix-permissions/0/1", "parse-logs/0/2")
    ui.move_to.value = C
    ui.buttons["move"].click()
    assert ui.counts()[D] == 0 and ui.counts()[C] == 4
    assert ui.edits[-1] == {"op": "move", "id": "parse-logs/0/2", "from": D, "to": C}
    ui.types_box.value = (B,)
    ui.examples_box.value = ("count-lines/0/3",)
    ui.buttons["split"].click()  # the name field still holds a taken name
    assert "exists already" in ui.status.value


def test_long_tail_toggle_and_undo(ui):
    ui.types_box.value = (A,)
    ui.buttons["long_tail"].click()
    assert ui.taxonomy.get(A).status == "long_tail" and ui.taxonomy.get(A).pinned
    assert shown_counts(ui)[A] == (4, "long_tail")
    assert ui.buttons["long_tail"].description == "Give back to threshold"
    ui.buttons["long_tail"].click()
    assert not ui.taxonomy.get(A).pinned and ui.edits[-1] == {"op": "long_tail", "type": A, "value": False}
    assert shown_counts(ui)[A] == (4, "kept") and ui.buttons["long_tail"].description == "Mark long tail"
    ui.buttons["undo"].click()
    assert shown_counts(ui)[A] == (4, "long_tail") and ui.buttons["long_tail"].description == "Give back to threshold"
    ui.buttons["undo"].click()
    assert not ui.taxonomy.get(A).pinned and ui.taxonomy.get(A).status == "kept"
    assert shown_counts(ui)[A] == (4, "kept")
    ui.buttons["undo"].click()
    assert "nothing to undo" in ui.status.value


def replay(store, base_version, edits, steps, relabel=None):
    base = store.load(base_version)
    tax, labels = apply_edits(base, store.load_labels(base_version), edits, relabel=relabel)
    apply_threshold(tax, type_stats(tax, labels, steps), base.threshold)
    return tax, labels


def test_save_writes_a_new_version_keeps_the_old_and_an_edit_list_that_replays(ui):
    store = TaxonomyStore(ui.run.stage_dir("taxonomy"))
    v1_text = store.version_path(1).read_text()
    v1_labels = store.labels_path(1).read_text()
    with pytest.raises(EditError, match="nothing to save"):
        ui.save()
    ui.merge([B, C], into="stops without real work")
    ui.types_box.value = (D,)
    ui.buttons["long_tail"].click()
    ui.note.value = "merged the stopping types"
    ui.buttons["save"].click()
    assert store.versions() == [1, 2] and ui.version == 2 and ui.edits == []
    assert store.version_path(1).read_text() == v1_text and store.labels_path(1).read_text() == v1_labels
    v2 = store.load(2)
    assert v2.parent == 1 and v2.note == "merged the stopping types" and v2.threshold == THRESHOLD
    # statuses re-measured at the threshold: 4/10 >= 0.25 now kept; the pinned one stays long tail
    assert {t.name: t.status for t in v2.types} == {A: "kept", "stops without real work": "kept", D: "long_tail"}
    assert "saved version 2" in ui.status.value and shown_counts(ui)["stops without real work"] == (4, "kept")
    edits = read_edits(edits_path(store, 2))
    assert edits == [{"op": "merge", "types": [B, C], "into": "stops without real work"},
                     {"op": "long_tail", "type": D}]
    tax, labels = replay(store, 1, edits, ui.steps)
    assert tax.types == v2.types and labels == store.load_labels(2)
    # a second save from v2: its edit list goes from v1 (what taxonomy.edits replays) to v3
    ui.rename(A, "acts before inspecting")
    ui.undo()
    ui.rename(A, "uses unseen output")
    assert ui.save() == 3 and store.versions() == [1, 2, 3]
    assert store.load(3).parent == 2 and store.load(3).edits == ui.store.load(3).edits
    edits3 = read_edits(edits_path(store, 3))
    assert edits3[:2] == edits and len(edits3) == 5
    tax, labels = replay(store, 1, edits3, ui.steps)
    assert tax.types == store.load(3).types and labels == store.load_labels(3)
    assert yaml.safe_load(edits_path(store, 2).read_text()) == edits  # the earlier list is not rewritten


def test_save_relabels_only_what_a_changed_definition_touched(tmp_path):
    asked = []

    def relabel(taxonomy, ids):
        asked.append(list(ids))
        return {i: [D] for i in ids}

    ui = CurationUI(make_run(tmp_path / "demo"), relabel=relabel)
    ui.rename(B, "replies without command")
    ui.define(C, "submits with no check of the result; not a failed check")
    assert asked == []  # nothing is asked until Save
    ui.save()
    assert asked == [["count-lines/1/2", "parse-logs/0/4"]]
    labels = {lb.id: lb.types for lb in TaxonomyStore(tmp_path / "demo" / "taxonomy").load_labels(2)}
    assert labels["count-lines/1/2"] == [D] and labels["parse-logs/0/4"] == [D]
    assert labels["count-lines/0/3"] == ["replies without command"] and labels["count-lines/0/1"] == [A]


def test_the_taxonomy_stage_replays_the_saved_edit_list(tmp_path):
    """The papermill path: a curated version's edit list given as taxonomy.edits makes the same taxonomy."""
    src = make_run(tmp_path / "src")
    steps_file = str(src / "profiling" / "error_steps.jsonl")
    run = tmp_path / "offline"
    run_taxonomy(make(taxonomy={"error_steps": steps_file}), run, progress=False)
    ui = CurationUI(run)  # the steps come from the file the stage's params name
    assert [s.id for s in ui.steps] == ALL_IDS
    first, second = ui.taxonomy.names()[:2]
    ui.merge([first, second], into="merged by hand")
    ui.types_box.value = (ui.taxonomy.names()[-1],)
    ui.buttons["long_tail"].click()
    assert ui.save() == 2
    edits = edits_path(ui.store, 2)
    s = run_taxonomy(make(taxonomy={"error_steps": steps_file, "edits": str(edits)}), run, progress=False)
    store = TaxonomyStore(run / "taxonomy")
    # the replay makes exactly the curated version, so it is that version, not a new one
    assert s["version"] == 2 and store.versions() == [1, 2] and store.load(2).parent == 1
    assert "merged by hand" in store.load(2).names()


def test_every_control_has_its_css_class(ui):
    from mirl.taxonomy.widget import CONTROLS

    seen, todo = set(), [ui.widget]
    while todo:
        x = todo.pop()
        seen |= {c for c in x._dom_classes if c.startswith("mirl-")}
        todo.extend(getattr(x, "children", ()))
    assert seen == {f"mirl-{c}" for c in CONTROLS}


def test_the_share_of_environments_is_of_every_profiled_environment(tmp_path):
    """As the stage's table (the paper's Table 2): of the environments profiling played, when its
    summary says how many; else of those with an error step."""
    import json

    run = make_run(tmp_path / "demo")
    with_errors = len({s.split("/")[0] for s in FLAGGED})
    before = CurationUI(run).stats().set_index("type")
    assert before.loc[A, "env_share"] == pytest.approx(3 / with_errors)
    (run / "profiling" / "summary.json").write_text(json.dumps({"environments": 30}))
    after = CurationUI(run).stats().set_index("type")
    assert after.loc[A, "env_share"] == pytest.approx(3 / 30) and after.loc[A, "envs"] == 3
