"""Each curation operation, undo, edit-list replay, and re-labelling only what an edit touched."""

from __future__ import annotations

import pytest

from mirl.records.taxonomy import ErrorType, Label, Taxonomy
from mirl.taxonomy.curation import Curator, EditError, apply_edits


def base():
    tax = Taxonomy(types=[ErrorType("acts without looking", "acts on unseen data", ["s1", "s2"]),
                          ErrorType("repeats failed command", "reruns unchanged", ["s3"]),
                          ErrorType("declares done early", "submits unchecked", ["s4"])])
    labels = [Label("s1", ["acts without looking"]), Label("s2", ["acts without looking", "repeats failed command"]),
              Label("s3", ["repeats failed command"]), Label("s4", ["declares done early"]), Label("s5", [], "one_off")]
    return tax, labels


def types_of(labels):
    return {lb.id: lb.types for lb in labels}


def test_rename_rewrites_labels_and_refuses_taken_or_bad_names():
    tax, labels = base()
    c = Curator(tax, labels)
    c.apply(op="rename", type="acts without looking", to="acts before inspecting")
    assert c.taxonomy.names()[0] == "acts before inspecting"
    assert types_of(c.labels)["s2"] == ["repeats failed command", "acts before inspecting"]
    with pytest.raises(EditError, match="exists already"):
        c.apply(op="rename", type="acts before inspecting", to="declares done early")
    with pytest.raises(EditError, match="2-5 words"):
        c.apply(op="rename", type="acts before inspecting", to="sloppy")
    with pytest.raises(EditError, match="not a file"):
        c.apply(op="rename", type="acts before inspecting", to="edits config.py blindly")
    assert tax.names()[0] == "acts without looking"  # the base is never changed


def test_merge_unions_examples_and_labels_without_duplicates():
    tax, labels = base()
    c = Curator(tax, labels)
    c.apply(op="merge", types=["acts without looking", "repeats failed command"], into="careless command use")
    assert c.taxonomy.names() == ["careless command use", "declares done early"]
    assert c.taxonomy.get("careless command use").examples == ["s1", "s2", "s3"]
    assert types_of(c.labels)["s2"] == ["careless command use"]


def test_split_moves_chosen_examples_to_a_new_type():
    tax, labels = base()
    c = Curator(tax, labels)
    c.apply(op="split", type="acts without looking", ids=["s2"], new="acts on unread output", definition="d")
    assert c.taxonomy.names()[:2] == ["acts without looking", "acts on unread output"]
    assert types_of(c.labels)["s2"] == ["repeats failed command", "acts on unread output"]
    assert types_of(c.labels)["s1"] == ["acts without looking"]
    assert c.taxonomy.get("acts without looking").examples == ["s1"]
    with pytest.raises(EditError, match="do not carry"):
        c.apply(op="split", type="declares done early", ids=["s1"], new="other new type")


def test_move_long_tail_and_undo():
    tax, labels = base()
    c = Curator(tax, labels)
    c.apply(op="move", id="s3", **{"from": "repeats failed command", "to": "declares done early"})
    assert types_of(c.labels)["s3"] == ["declares done early"]
    c.apply(op="long_tail", type="declares done early")
    assert c.taxonomy.get("declares done early").status == "long_tail" and c.taxonomy.get("declares done early").pinned
    c.undo()
    assert not c.taxonomy.get("declares done early").pinned
    c.undo()
    assert types_of(c.labels)["s3"] == ["repeats failed command"]
    with pytest.raises(EditError, match="nothing to undo"):
        c.undo()


def test_edit_list_replays_what_a_person_did_and_relabels_only_touched_steps():
    tax, labels = base()
    c = Curator(tax, labels)
    c.apply(op="rename", type="declares done early", to="submits without checking")
    c.apply(op="merge", types=["acts without looking", "repeats failed command"])
    c.undo()
    c.apply(op="define", type="repeats failed command", definition="reruns a failed command unchanged; not a retry with a fix")
    asked = []

    def relabel(taxonomy, ids):
        asked.append(ids)
        return {i: ["repeats failed command"] for i in ids}

    replayed, replayed_labels = apply_edits(tax, labels, c.edits, relabel=relabel)
    assert asked == [["s2", "s3"]]  # only the steps that carried the redefined type
    assert replayed.names() == c.taxonomy.names()
    assert replayed.get("repeats failed command").definition.startswith("reruns a failed")
    assert types_of(replayed_labels)["s2"] == ["repeats failed command"]
    assert types_of(replayed_labels)["s4"] == ["submits without checking"]
    assert replayed.edits == c.edits and len(c.edits) == 4
    with pytest.raises(EditError, match=r"edit 0 \(merge\).*no type named"):
        apply_edits(tax, labels, [{"op": "merge", "types": ["nope nope", "declares done early"]}])
    with pytest.raises(EditError, match="unknown edit"):
        apply_edits(tax, labels, [{"op": "explode"}])
