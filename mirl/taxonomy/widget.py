"""Curating a saved taxonomy version in JupyterLab (ipywidgets): browse the types with their counts
and examples, search, rename, define, merge, split, move, mark long tail, undo, save a new version.

Each control calls a method of `CurationUI` (`ui.merge(["a b", "c d"], into="e f")`) and each method
is one edit of a `Curator`, so what a person clicked is an edit list. Save writes it as a new version
(the old ones stay) and as `taxonomy/edits/vNNN.yaml` beside it: the edits from the annotator's
version to the new one, which `taxonomy.edits` replays headless in a papermill run.

    ui = CurationUI("runs/demo")      # the latest version; version=1 for another
    ui.show()

Every control carries a CSS class `mirl-<name>` (see `CONTROLS`) for browser tests.
"""

from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import Any

import ipywidgets as w
import yaml

from mirl.records.error_step import ErrorStep
from mirl.records.loaders import profiled_environments
from mirl.records.taxonomy import Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import Step
from mirl.runner.layout import RunDir, atomic_write
from mirl.taxonomy.curation import Curator, EditError, Relabel, apply_edits
from mirl.taxonomy.examples import TAXONOMY, Prefixes, matches, run_error_steps
from mirl.taxonomy.stats import apply_threshold, type_stats

EDITS_DIR = "edits"
BUTTONS = {"rename": "Rename", "define": "Save definition", "merge": "Merge selected", "split": "Split off",
           "move": "Move", "long_tail": "Mark long tail", "undo": "Undo", "save": "Save version"}
CONTROLS = ("curation", "header", "status", "types", "stats", "new-name", "definition", "move-to", "search",
            "examples", "detail", "prefix", "note", "edits", *(f"{b.replace('_', '-')}" for b in BUTTONS))
MAX_DETAIL = 5  # examples shown in full at once
MAX_OUTPUT = 600  # characters of a prefix step's output shown


def edits_path(store: TaxonomyStore, version: int) -> Path:
    return store.root / EDITS_DIR / f"v{version:03d}.yaml"


def lineage_edits(store: TaxonomyStore, version: int) -> tuple[int, list[dict[str, Any]]]:
    """The annotator's version under `version` (the first without a parent) and the edits from it to `version`."""
    chain: list[list[dict[str, Any]]] = []
    seen = set()
    while True:
        tax = store.load(version)
        if tax.parent is None:
            return version, [e for edits in reversed(chain) for e in edits]
        if tax.parent in seen or tax.parent >= version:
            raise ValueError(f"{store.version_path(version)}: parent {tax.parent} does not come before it")
        seen.add(version)
        chain.append(tax.edits)
        version = tax.parent


class CurationUI:
    """A curation session on one taxonomy version of a run; `widget` is what JupyterLab shows.

    `relabel(taxonomy, ids) -> {id: [types]}` re-labels the steps a changed definition touched when
    saving (e.g. `TaxonomyStage.relabel` with the LLM annotator); without it their labels stay."""

    def __init__(self, run_dir: str | Path, version: int | None = None, relabel: Relabel | None = None,
                 steps: list[ErrorStep] | None = None):
        self.run = RunDir(run_dir)
        self.store = TaxonomyStore(self.run.stage_dir(TAXONOMY))
        steps_file = None
        if steps is None:
            steps, steps_file = run_error_steps(self.run)
        self.steps = list(steps)
        self.by_id = {s.id: s for s in self.steps}
        # the share of environments is of every profiled environment, as the stage's table says (Table 2);
        # of those with an error step when the steps come from elsewhere
        from_profiling = steps_file is not None and steps_file == self.run.file("profiling", "error_steps.jsonl")
        self.profiled_envs = profiled_environments(self.run) if from_profiling else None
        self.prefixes = Prefixes(self.run, steps_file)
        self.relabel = relabel
        self.message = ""
        self._busy = False
        self._open(version)
        self._build()
        self.refresh()

    def _open(self, version: int | None) -> None:
        self.base = self.store.load(version)
        self.version = self.base.version
        self.curator = Curator(self.base, self.store.load_labels(self.version))

    # --- what the session holds -------------------------------------------------------------------

    @property
    def taxonomy(self) -> Taxonomy:
        return self.curator.taxonomy

    @property
    def labels(self) -> list[Label]:
        return self.curator.labels

    @property
    def edits(self) -> list[dict[str, Any]]:
        return list(self.curator.edits)

    def stats(self):
        """`stats.type_stats` of the edited taxonomy (a DataFrame, largest share first), with the status
        each type gets on Save: kept or long tail at the version's threshold, unless pinned."""
        preview = copy.deepcopy(self.taxonomy)
        apply_threshold(preview, type_stats(preview, self.labels, self.steps, self.profiled_envs), self.base.threshold)
        return type_stats(preview, self.labels, self.steps, self.profiled_envs)

    def counts(self) -> dict[str, int]:
        """Error steps per type, as the type list shows them."""
        return {row.type: int(row.steps) for row in self.stats().itertuples()}

    def touched(self) -> set[str]:
        """Steps whose type got a new definition: re-labelled on save when there is a `relabel`."""
        return set(self.curator._states[-1].touched)

    def examples(self, types: list[str] | tuple[str, ...] | None = None, query: str = "") -> list[str]:
        """Ids of the steps carrying any of `types` (all steps when none) that match the search `query`."""
        wanted = set(types or ())
        for name in wanted:
            self.taxonomy.get(name)  # an unknown type is an error, not an empty list
        ids = [lb.id for lb in self.labels if not wanted or wanted & set(lb.types)]
        return [i for i in ids if i in self.by_id and (not query or matches(self.by_id[i], query))]

    def search(self, query: str, types: list[str] | None = None) -> list[str]:
        return self.examples(types, query)

    def prefix(self, step_id: str) -> list[Step]:
        """The trajectory's steps before this error step."""
        if step_id not in self.by_id:
            raise KeyError(f"no error step {step_id!r}")
        return self.prefixes.of(self.by_id[step_id])

    # --- edits (each one a Curator edit) ---------------------------------------------------------

    def _apply(self, **edit: Any) -> Taxonomy:
        self.curator.apply(**edit)
        self.refresh()
        return self.taxonomy

    def rename(self, type: str, to: str) -> Taxonomy:
        return self._apply(op="rename", type=type, to=to)

    def define(self, type: str, definition: str) -> Taxonomy:
        return self._apply(op="define", type=type, definition=definition)

    def merge(self, types: list[str], into: str | None = None, definition: str | None = None) -> Taxonomy:
        edit: dict[str, Any] = {"op": "merge", "types": list(types)}
        if into:
            edit["into"] = into
        if definition:
            edit["definition"] = definition
        return self._apply(**edit)

    def split(self, type: str, ids: list[str], new: str, definition: str | None = None) -> Taxonomy:
        edit: dict[str, Any] = {"op": "split", "type": type, "ids": list(ids), "new": new}
        if definition:
            edit["definition"] = definition
        return self._apply(**edit)

    def move(self, step_id: str, src: str, dst: str) -> Taxonomy:
        return self._apply(op="move", id=step_id, **{"from": src, "to": dst})

    def long_tail(self, type: str, value: bool = True) -> Taxonomy:
        edit: dict[str, Any] = {"op": "long_tail", "type": type}
        if not value:
            edit["value"] = False
        return self._apply(**edit)

    def undo(self) -> Taxonomy:
        self.curator.undo()
        self.refresh()
        return self.taxonomy

    def save(self, note: str = "") -> int:
        """Write the edited taxonomy as the next version (statuses re-measured at the version's
        threshold, pinned ones kept) and its edit list beside it; the session goes on from it."""
        if not self.curator.edits:
            raise EditError(f"nothing to save: no edits since version {self.version}")
        edited, labels = apply_edits(self.base, self.curator.base_labels, self.curator.edits, relabel=self.relabel)
        edited.parent = self.version
        edited.note = note or f"curated from v{self.version:03d}"
        apply_threshold(edited, type_stats(edited, labels, self.steps), self.base.threshold)
        root, before = lineage_edits(self.store, self.version)
        version = self.store.save(edited, labels)
        atomic_write(edits_path(self.store, version),
                     f"# the edits from taxonomy v{root:03d} to v{version:03d}; replay with taxonomy.edits\n"
                     + yaml.safe_dump([*before, *self.curator.edits], sort_keys=False, allow_unicode=True, width=100))
        self._open(version)
        self.message = f"saved version {version} ({edits_path(self.store, version).name} holds its edits)"
        self.refresh()
        return version

    # --- the widgets -----------------------------------------------------------------------------

    def _build(self) -> None:
        def ctl(widget, name):
            widget.add_class(f"mirl-{name}")
            return widget

        full = w.Layout(width="100%")
        fit = {"layout": w.Layout(width="auto")}
        self.header = ctl(w.HTML(), "header")
        self.status = ctl(w.HTML(), "status")
        self.types_box = ctl(w.SelectMultiple(description="Types", rows=10, layout=full), "types")
        self.stats_view = ctl(w.HTML(), "stats")
        self.new_name = ctl(w.Text(description="Name", placeholder="new type name (2-5 words)", layout=full),
                            "new-name")
        self.definition = ctl(w.Textarea(description="Definition", rows=3, layout=full), "definition")
        self.move_to = ctl(w.Dropdown(description="Move to"), "move-to")
        self.search_box = ctl(w.Text(description="Search", placeholder="words in command, description, reason, id",
                                     layout=full), "search")
        self.examples_box = ctl(w.SelectMultiple(description="Examples", rows=8, layout=full), "examples")
        self.detail = ctl(w.HTML(), "detail")
        self.show_prefix = ctl(w.ToggleButton(description="Show prefix", value=False, **fit), "prefix")
        self.note = ctl(w.Text(description="Note", placeholder="what this version changes"), "note")
        self.edits_view = ctl(w.HTML(), "edits")
        self.buttons = {op: ctl(w.Button(description=label, button_style="primary" if op == "save" else "", **fit),
                                op.replace("_", "-")) for op, label in BUTTONS.items()}
        handlers = {"rename": self._on_rename, "define": self._on_define, "merge": self._on_merge,
                    "split": self._on_split, "move": self._on_move, "long_tail": self._on_long_tail,
                    "undo": lambda: self.undo(), "save": lambda: self.save(self.note.value.strip())}
        for op, button in self.buttons.items():
            button.on_click(self._guard(handlers[op]))
        self.types_box.observe(self._on_types, names="value")
        self.search_box.observe(lambda _: self._refresh_examples(), names="value")
        self.examples_box.observe(lambda _: self._refresh_detail(), names="value")
        self.show_prefix.observe(lambda _: self._refresh_detail(), names="value")
        b = self.buttons

        def row(*children):
            return w.HBox(list(children), layout=w.Layout(flex_flow="row wrap"))

        half = {"layout": w.Layout(width="49%", padding="0 4px 0 0")}
        self.widget = ctl(w.VBox([
            self.header, self.status,
            row(w.VBox([self.types_box, self.new_name, self.definition,
                        row(b["rename"], b["define"], b["merge"], b["long_tail"])], **half),
                w.VBox([self.search_box, self.examples_box,
                        row(b["split"], self.move_to, b["move"], self.show_prefix)], **half)),
            self.detail,
            row(b["undo"], self.note, b["save"]),
            self.edits_view, self.stats_view,
        ]), "curation")

    def show(self) -> None:
        from IPython.display import display

        display(self.widget)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _guard(self, action):
        """A button handler: run `action`, show what went wrong instead of raising into the front end."""
        def handler(_button=None):
            try:
                self.message = ""
                action()
            except (EditError, KeyError, ValueError, LookupError, OSError) as e:
                self.message = f"<b style='color:#b00020'>{html.escape(str(e.args[0] if e.args else e))}</b>"
                self._refresh_status()
        return handler

    def selected(self) -> list[str]:
        return list(self.types_box.value)

    def _one_type(self, what: str) -> str:
        if len(self.types_box.value) != 1:
            raise EditError(f"{what}: select exactly one type")
        return self.types_box.value[0]

    def _on_rename(self) -> None:
        src, to = self._one_type("rename"), self.new_name.value.strip()
        self.rename(src, to)
        self._select([to])

    def _on_define(self) -> None:
        self.define(self._one_type("define"), self.definition.value.strip())

    def _on_merge(self) -> None:
        names = self.selected()
        if len(names) < 2:
            raise EditError("merge: select two or more types")
        into = self.new_name.value.strip() or names[0]
        self.merge(names, into)
        self._select([into])

    def _on_split(self) -> None:
        src, ids, new = self._one_type("split"), list(self.examples_box.value), self.new_name.value.strip()
        if not ids:
            raise EditError("split: select the examples that go to the new type")
        definition = self.definition.value.strip()
        self.split(src, ids, new, definition if definition != self.taxonomy.get(src).definition else None)
        self._select([src, new])

    def _on_move(self) -> None:
        src, ids, dst = self._one_type("move"), list(self.examples_box.value), self.move_to.value
        if not ids or not dst:
            raise EditError("move: select examples and the type to move them to")
        for i in ids:
            self.move(i, src, dst)

    def _on_long_tail(self) -> None:
        t = self.taxonomy.get(self._one_type("long tail"))
        self.long_tail(t.name, value=not (t.pinned and t.status == "long_tail"))

    def _select(self, names: list[str]) -> None:
        self.types_box.value = tuple(n for n in names if n in self.taxonomy.names())

    def _on_types(self, _change=None) -> None:
        if self._busy:
            return
        names = self.selected()
        if names:
            t = self.taxonomy.get(names[0])
            self.definition.value = t.definition
            self.buttons["long_tail"].description = ("Give back to threshold" if t.pinned and t.status == "long_tail"
                                                     else BUTTONS["long_tail"])
        self._refresh_examples()

    # --- refreshing what is shown ----------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw everything from the Curator's state (after every edit)."""
        table = self.stats()
        self._busy = True
        try:
            keep = [n for n in self.types_box.value if n in self.taxonomy.names()]
            self.types_box.options = [(f"{r.type} — {r.steps} steps ({r.share:.1%}) · {r.status}", r.type)
                                      for r in table.itertuples()]
            self.types_box.value = tuple(keep)
            names = self.taxonomy.names()
            self.move_to.options = names
            if self.move_to.value not in names:
                self.move_to.value = names[0] if names else None
        finally:
            self._busy = False
        self._on_types()
        n_edits = sum(e.get("op") != "undo" for e in self.curator.edits)
        self.header.value = (f"<h3>Taxonomy v{self.version:03d} of run {html.escape(self.run.name)}</h3>"
                             f"{len(self.steps)} error steps · {len(self.taxonomy.types)} types · "
                             f"{int((table['status'] == 'kept').sum())} kept (share ≥ {self.base.threshold:.0%}) · "
                             f"{len(self.curator.edits)} unsaved edit(s)"
                             + (f" · {len(self.touched())} step(s) to re-label" if self.touched() else ""))
        rows = "".join(f"<tr><td>{html.escape(r.type)}</td><td>{r.steps}</td><td>{r.share:.1%}</td><td>{r.envs}</td>"
                       f"<td>{r.status}</td><td>{html.escape(r.definition)}</td></tr>" for r in table.itertuples())
        self.stats_view.value = ("<style>.mirl-stats td, .mirl-stats th {padding: 2px 10px; text-align: left;"
                                 " vertical-align: top}</style><table><tr><th>type</th><th>steps</th><th>share</th><th>envs</th><th>status</th>"
                                 f"<th>definition</th></tr>{rows}</table>")
        self.edits_view.value = ("<b>Edits since v%03d</b> (%d applied):<br>" % (self.version, n_edits)
                                 + "<br>".join(html.escape(yaml.safe_dump(e, default_flow_style=True, width=1000).strip())
                                               for e in self.curator.edits) if self.curator.edits else "")
        self._refresh_status()

    def _refresh_status(self) -> None:
        self.status.value = self.message

    def _refresh_examples(self) -> None:
        ids = self.examples(self.selected(), self.search_box.value.strip())
        keep = [i for i in self.examples_box.value if i in ids]
        options = []
        for i in ids:
            command = self.by_id[i].rejected_command or "(no command)"
            options.append((f"{i} · {command.splitlines()[0] if command.strip() else command}"[:140], i))
        self.examples_box.options = options
        self.examples_box.value = tuple(keep)
        self._refresh_detail()

    def _refresh_detail(self) -> None:
        types_of = {lb.id: lb.types for lb in self.labels}
        parts = []
        for i in list(self.examples_box.value)[:MAX_DETAIL]:
            s = self.by_id[i]
            part = (f"<div><b>{html.escape(i)}</b> · types: {html.escape(', '.join(types_of.get(i, [])) or '-')}"
                    f" · {html.escape(s.source)}<pre>{html.escape(s.rejected_command or '(no command)')}</pre>"
                    f"<i>description:</i> {html.escape(s.description or '-')}<br>"
                    f"<i>reason:</i> {html.escape(s.reason or '-')}")
            if self.show_prefix.value:
                part += self._prefix_html(i)
            parts.append(part + "</div>")
        more = len(self.examples_box.value) - MAX_DETAIL
        self.detail.value = "<hr>".join(parts) + (f"<p>and {more} more selected</p>" if more > 0 else "")

    def _prefix_html(self, step_id: str) -> str:
        try:
            steps = self.prefix(step_id)
        except (LookupError, OSError) as e:
            return f"<p><i>prefix:</i> {html.escape(str(e.args[0] if e.args else e))}</p>"
        if not steps:
            return "<p><i>prefix:</i> none (the first step)</p>"
        rows = []
        for n, st in enumerate(steps):
            out = st.output if len(st.output) <= MAX_OUTPUT else st.output[:MAX_OUTPUT] + " …"
            rows.append(f"[{n}] $ {st.command if st.command is not None else '(no command)'}\n{out}")
        return f"<p><i>prefix ({len(steps)} steps):</i></p><pre class='mirl-prefix-view'>{html.escape(chr(10).join(rows))}</pre>"
