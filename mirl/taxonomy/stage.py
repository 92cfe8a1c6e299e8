"""The taxonomy stage on the common runner: candidate types, labels for every error step, then a
saved taxonomy version with its statistics.

Plan: the candidate types are made once and kept in `taxonomy/candidates.yaml` (offline: embedding
clusters and rule labels; LLM: propose on a first random batch, refine on fresh batches until few
steps are left as new_pattern or the batch budget is spent; calls are cached, so a killed run
replays them for free). Items: labelling batches of error steps against the fixed candidate list,
keyed by batch. Finalize: labels -> statistics -> kept types (share >= threshold) -> a new taxonomy
version when it differs from the latest; then the edit list of `taxonomy.edits`, if any, as the
version after it.

Output under `runs/<name>/taxonomy/`: candidates.yaml, label_batches.jsonl (the resume point),
versions/vNNN.yaml and labels/vNNN.jsonl (see `mirl.records.taxonomy`), stats.csv, summary.json.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mirl.agent.rollout import role_fingerprint
from mirl.records.error_step import ErrorStep
from mirl.records.loaders import load_error_steps, read_error_steps
from mirl.records.taxonomy import ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.runner.layout import atomic_write
from mirl.runner.stage import Item, Stage, run_stage, stage_budgets
from mirl.taxonomy import curation, stats

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "taxonomy"
CANDIDATES = "candidates.yaml"
LABEL_BATCHES = "label_batches.jsonl"
STATS = "stats.csv"


class TaxonomyStage(Stage):
    name = STAGE
    records = LABEL_BATCHES
    key_fields = ("batch",)
    derived = (CANDIDATES, STATS)

    def __init__(self, params: Params, run_dir, annotator=None):
        super().__init__(params, run_dir)
        self._annotator = annotator  # an LLMAnnotator-like object (tests), else built from params
        self._steps: list[ErrorStep] | None = None
        self._client = None
        self._lock = threading.Lock()
        self.how = ""
        if params.taxonomy.edits:  # a bad edit list fails before anything of the run is read or written
            read_edits(params.taxonomy.edits)

    @property
    def reads(self) -> tuple[str, ...]:  # type: ignore[override]
        return () if self.params.taxonomy.error_steps else ("profiling",)

    @property
    def store(self) -> TaxonomyStore:
        return TaxonomyStore(self.out)

    # --- inputs -----------------------------------------------------------------------------------

    def steps(self) -> list[ErrorStep]:
        if self._steps is None:
            p = self.params.taxonomy
            if p.error_steps:
                if not Path(p.error_steps).exists():
                    raise FileNotFoundError(f"taxonomy.error_steps: no such file {p.error_steps}")
                self._steps = read_error_steps(p.error_steps)
            else:
                self._steps = load_error_steps(self.run)
            ids = [s.id for s in self._steps]
            if len(set(ids)) != len(ids):
                raise ValueError("error steps with the same id (env/seed/step) appear twice")
        return self._steps

    def profiled_environments(self) -> int | None:
        """How many environments profiling played (its summary), the denominator of the share of
        environments; None when the error steps come from elsewhere (taxonomy.error_steps)."""
        if self.params.taxonomy.error_steps:
            return None
        from mirl.records.loaders import profiled_environments

        return profiled_environments(self.run)

    def warm_up(self) -> None:
        self.client()

    def client(self):
        with self._lock:
            if self._client is None:
                from mirl.llm.client import LLMClient

                cfg = replace(self.params.models, stage_budget_usd=stage_budgets(self.params))
                self._client = LLMClient(cfg, run_dir=self.run.root, stage=STAGE)
            return self._client

    def annotator(self):
        if self._annotator is None:
            from mirl.roles.annotator import LLMAnnotator

            self._annotator = LLMAnnotator(self.client(), self.params.taxonomy.max_command_chars)
        return self._annotator

    def fingerprint(self) -> dict[str, Any]:
        p = self.params.taxonomy
        fp: dict[str, Any] = {"taxonomy": {k: v for k, v in asdict(p).items()
                                           if k not in ("workers", "budget_usd", "examples", "edits", "threshold")},
                              "error_steps": sorted(s.id for s in self.steps())}
        if p.annotator == "llm":
            fp["models"] = {"annotator": role_fingerprint(self.params.models, "annotator")}
        return fp

    # --- candidates -------------------------------------------------------------------------------

    def order(self) -> list[ErrorStep]:
        steps = sorted(self.steps(), key=lambda s: s.id)
        random.Random(self.params.taxonomy.seed).shuffle(steps)
        return steps

    def candidates(self) -> tuple[list[ErrorType], list[Label] | None]:
        """The candidate types (and, offline, their labels), made once per run."""
        path = self.out / CANDIDATES
        if path.exists():
            data = yaml.safe_load(path.read_text()) or {}
            types = [ErrorType(**t) for t in data.get("types") or []]
            labels = [Label(**lb) for lb in data["labels"]] if data.get("labels") is not None else None
            self.how = data.get("how", "")
            return types, labels
        p = self.params.taxonomy
        labels: list[Label] | None = None
        if p.annotator == "offline":
            from mirl.roles.annotator_offline import OfflineAnnotator

            off = OfflineAnnotator(max_clusters=p.max_clusters, seed=p.seed)
            types, labels = off.annotate(self.steps())
            self.how = off.how
        elif p.annotator == "rules":
            from mirl.roles.annotator_offline import RuleAnnotator

            types, labels = RuleAnnotator().annotate(self.steps())
            self.how = RuleAnnotator.how
        else:
            types, self.how = self.propose_and_refine()
        data = {"how": self.how, "types": [asdict(t) for t in types],
                "labels": [asdict(lb) for lb in labels] if labels is not None else None}
        atomic_write(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
        return types, labels

    def propose_and_refine(self) -> tuple[list[ErrorType], str]:
        """Propose types on the first batch, refine on fresh ones, then keep the types that recur: a
        type counts in a batch where it is proposed or assigned an example, and it is kept when it
        counts in at least `recur_batches` batches (the paper: "keep the types that recur across
        batches"). With fewer batches read than that, nothing can recur and every type is kept (said in
        the stage's `how`)."""
        p = self.params.taxonomy
        steps = self.order()
        batches = [steps[i:i + p.batch_size] for i in range(0, len(steps), p.batch_size)]
        if not batches:
            return [], "no error steps"
        ann = self.annotator()
        first = ann.propose(batches[0])
        types = [ErrorType(name=t["name"], definition=t["definition"], examples=list(dict.fromkeys(t["example_ids"])),
                           provenance="llm: propose, batch 0") for t in first["types"]]
        seen: dict[str, set[int]] = {t.name: {0} for t in types}
        done, how = 1, ""
        for b, batch in enumerate(batches[1:p.refine_batches + 1], 1):
            reply = ann.refine(types, batch)
            done += 1
            by_name = {t.name: t for t in types}
            for a in reply["assignments"]:
                for name in a["types"]:
                    if name in by_name:
                        seen[name].add(b)
                        if len(by_name[name].examples) < 5:
                            by_name[name].examples.append(a["id"])
            for t in reply["new_types"]:
                types.append(ErrorType(name=t["name"], definition=t["definition"],
                                       examples=list(dict.fromkeys(t["example_ids"])),
                                       provenance=f"llm: refine, batch {b}"))
                seen[t["name"]] = {b}
            new_pattern = sum(u["reason"] == "new_pattern" for u in reply["unassigned"]) / max(len(batch), 1)
            if new_pattern < p.new_pattern_stop:
                how = f"propose + {b} refine batch(es); new_pattern share {new_pattern:.2f} < {p.new_pattern_stop}"
                break
        how = how or f"propose + {done - 1} refine batch(es) (batch budget or steps used up)"
        for t in types:
            t.provenance += f"; in batch(es) {', '.join(str(b) for b in sorted(seen[t.name]))}"
        if done < p.recur_batches:
            return types, how + f"; {done} batch(es) read, fewer than recur_batches = {p.recur_batches}: every type kept"
        kept = [t for t in types if len(seen[t.name]) >= p.recur_batches]
        dropped = [t.name for t in types if len(seen[t.name]) < p.recur_batches]
        if dropped:
            log.info("taxonomy: %d candidate type(s) seen in fewer than %d batches left out: %s", len(dropped),
                     p.recur_batches, "; ".join(dropped))
        return kept, how + (f"; {len(kept)} of {len(types)} types recur in >= {p.recur_batches} batches"
                            + (f" (left out: {'; '.join(dropped)})" if dropped else ""))

    # --- items: labelling batches ----------------------------------------------------------------

    def plan(self) -> list[Item]:
        types, labels = self.candidates()
        if labels is not None:  # offline: labelled with the candidates
            return []
        size = self.params.taxonomy.label_batch_size
        ids = [s.id for s in self.order()]
        return [Item((b,), (b, ids[i:i + size])) for b, i in enumerate(range(0, len(ids), size))]

    def run_item(self, payload) -> dict[str, Any]:
        batch, ids = payload
        types, _ = self.candidates()
        by_id = {s.id: s for s in self.steps()}
        reply = self.annotator().label(types, [by_id[i] for i in ids], by_id)
        return {"batch": batch, "ids": ids, "assignments": reply["assignments"], "unassigned": reply["unassigned"]}

    def relabel(self, taxonomy: Taxonomy, ids: list[str]) -> dict[str, list[str]]:
        """Fresh labels for the steps an edit touched (LLM annotator only)."""
        by_id = {s.id: s for s in self.steps()}
        size = self.params.taxonomy.label_batch_size
        out: dict[str, list[str]] = {}
        for i in range(0, len(ids), size):
            reply = self.annotator().label(taxonomy.types, [by_id[x] for x in ids[i:i + size]], by_id)
            out.update({a["id"]: a["types"] for a in reply["assignments"]})
            out.update({u["id"]: [] for u in reply["unassigned"]})
        return out

    # --- finalize -----------------------------------------------------------------------------------

    def labels_from(self, records: list[dict[str, Any]]) -> list[Label]:
        _, offline = self.candidates()
        if offline is not None:
            return offline
        labels = {}
        for r in sorted(records, key=lambda r: r["batch"]):
            for a in r["assignments"]:
                labels[a["id"]] = Label(id=a["id"], types=list(dict.fromkeys(a["types"])))
            for u in r["unassigned"]:
                labels[u["id"]] = Label(id=u["id"], unassigned=u["reason"])
        return [labels[s.id] for s in sorted(self.steps(), key=lambda s: s.id) if s.id in labels]

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        p = self.params.taxonomy
        types, _ = self.candidates()
        labels = self.labels_from(records)
        steps = self.steps()
        if len(labels) < len(steps):
            return {"version": None, "labelled": len(labels), "error_steps": len(steps)}
        taxonomy = Taxonomy(types=[replace(t) for t in types], note=f"{p.annotator} annotator: {self.how}")
        profiled = self.profiled_environments()
        table = stats.type_stats(taxonomy, labels, steps, profiled)
        stats.apply_threshold(taxonomy, table, p.threshold)
        version = self._save_if_new(taxonomy, labels, final=not p.edits)
        if p.edits:
            edits = read_edits(p.edits)
            base = self.store.load(version)
            try:
                edited, edited_labels = curation.apply_edits(
                    base, self.store.load_labels(version), edits,
                    relabel=self.relabel if p.annotator == "llm" else None)
            except curation.EditError as e:
                raise ValueError(f"{p.edits}: {e}") from None
            edited.parent, edited.note = version, f"edits from {p.edits}"
            stats.apply_threshold(edited, stats.type_stats(edited, edited_labels, steps), p.threshold)
            version = self._save_if_new(edited, edited_labels)
        final = self.store.load(version)
        final_labels = self.store.load_labels(version)
        table = stats.type_stats(final, final_labels, steps, profiled)
        table.to_csv(self.out / STATS, index=False)
        kept = [t.name for t in final.kept()]
        return {"version": version, "error_steps": len(steps), "types": len(final.types), "kept": kept,
                "environments": stats.env_denominator(steps, profiled),
                "union_coverage": round(stats.union_coverage(final_labels, kept, len(steps)), 4),
                "union_env_coverage": round(stats.union_env_coverage(final_labels, kept, steps, profiled), 4),
                "unassigned": sum(1 for lb in final_labels if not lb.types), "how": self.how}

    def _save_if_new(self, taxonomy: Taxonomy, labels: list[Label], final: bool = True) -> int:
        """Save as the next version unless one already holds exactly this: for the run's final version
        (what later stages read, the latest) only the latest counts, so a version matching an older one
        is saved again; for a base that edits follow, any version does (a resume adds none)."""
        store = self.store
        for v in reversed(store.versions()[-1:] if final else store.versions()):
            if (_comparable(store.load(v)) == _comparable(taxonomy)
                    and [asdict(x) for x in store.load_labels(v)] == [asdict(x) for x in labels]):
                return v
        return store.save(taxonomy, labels)


def _comparable(t: Taxonomy) -> dict[str, Any]:
    """What makes two versions the same: types, edits, threshold (not the version number or the note)."""
    d = t.to_dict()
    d.pop("version", None)
    d.pop("note", None)
    return d


def read_edits(path: str | Path) -> list[dict[str, Any]]:
    """An edit list from YAML (a list of {op: ...} mappings); errors name the file."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"taxonomy.edits: no such file {path}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and "op" in e for e in data):
        raise ValueError(f"{path}: an edit list is a YAML list of mappings with an `op` key")
    unknown = [f"edit {i} has op {e['op']!r}" for i, e in enumerate(data) if e["op"] not in curation.OPS]
    if unknown:
        raise ValueError(f"{path}: {'; '.join(unknown)}; known ops: {', '.join(curation.OPS)}")
    return data


def run_taxonomy(params: Params, run_dir: str | Path, annotator=None, force: bool = False,
                 progress: bool = True) -> dict[str, Any]:
    """Make, label and save the run's taxonomy (resumable); returns the stage summary."""
    return run_stage(TaxonomyStage(params, run_dir, annotator=annotator), force=force, progress=progress)
