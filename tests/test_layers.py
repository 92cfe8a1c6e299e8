"""Imports run one way: down the layers of the design, never in a circle, never from one stage to another.

Three views of the same source tree, read from the code (every import but those under
`if TYPE_CHECKING:`, function-level ones included):
- each package imported alone pulls in only what its layer allows (`FORBIDDEN`, checked by importing);
- no circle between packages, nor between the modules inside any package (`__init__` counts: a
  module that imports its own package's `__init__` runs it);
- every import goes to the same layer or a lower one of `LAYERS`, and no stage package imports
  another stage package: what a stage reads from earlier stages comes from `mirl.records` loaders
  and `mirl.runner.inputs`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# package (or module) imported alone -> mirl packages it must never pull in
FORBIDDEN = {
    "mirl.tasks": {"sandbox", "agent", "llm", "detectors", "roles", "runner", "profiling", "records"},
    "mirl.records": {"sandbox", "agent", "llm", "detectors", "roles", "profiling", "taxonomy", "prefixes"},
    "mirl.detectors": {"sandbox", "agent", "llm", "roles", "profiling"},
    "mirl.llm": {"sandbox", "agent", "detectors", "roles", "profiling", "records"},
    "mirl.engines": {"llm", "sandbox", "agent", "detectors", "roles", "runner", "profiling", "records"},
    "mirl.runner": {"sandbox", "agent", "detectors", "roles", "profiling", "taxonomy", "prefixes"},
    "mirl.sandbox": {"agent", "llm", "detectors", "roles", "runner", "profiling"},
}

# The layers of the design, bottom to top (a module belongs to the longest prefix that names it).
# Base holds what imports nothing of the kit above it: the run layout, the typed builder of params
# classes, the plot style, the paper's printed numbers and their figures, the evaluation statistics (pure functions
# over plain records, which the taxonomy review's kappa uses too).
LAYERS = [
    ("base", ["mirl", "mirl.paths", "mirl.jsonl", "mirl.runner.layout", "mirl.typed", "mirl.plotstyle",
              "mirl.reported", "mirl.paper_figures", "mirl.evaluate.stats"]),
    ("records and tasks", ["mirl.records", "mirl.tasks"]),
    ("sandbox, LLM choke point, policy engines", ["mirl.sandbox", "mirl.llm", "mirl.engines"]),
    ("agent harness, detectors, trajectory sources", ["mirl.agent", "mirl.detectors", "mirl.sources"]),
    ("roles", ["mirl.roles"]),
    # parallel rollouts are a runner stage of their own; the stage inputs load task pools through them
    ("stage runner", ["mirl.runner", "mirl.agent.rollout", "mirl.runner.inputs"]),
    ("stages", ["mirl.profiling", "mirl.taxonomy", "mirl.prefixes", "mirl.training", "mirl.evaluate", "mirl.cost"]),
    ("params", ["mirl.params", "mirl.recipes"]),
    ("notebooks, batch, report pages, commands", ["mirl.notebook", "mirl.batch", "mirl.batch_jobs", "mirl.report_index",
                                                   "mirl.commands", "mirl.cli", "mirl.__main__"]),
]
STAGES = dict(LAYERS)["stages"]


def pulled_in(module: str) -> set[str]:
    """mirl packages in sys.modules after importing `module` and, for a package, every module in it."""
    code = (f"import sys, json, importlib, pkgutil, {module} as m\n"
            "for info in pkgutil.walk_packages(getattr(m, '__path__', []), m.__name__ + '.'):\n"
            "    importlib.import_module(info.name)\n"
            "print(json.dumps(sorted({n.split('.')[1] for n in sys.modules if n.startswith('mirl.')})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_a_package_alone_pulls_in_only_its_layer(module):
    bad = pulled_in(module) & FORBIDDEN[module]
    assert not bad, f"importing {module} pulls in mirl.{', mirl.'.join(sorted(bad))}"


# --- the import graph, read from the source ---------------------------------------------------------


def source_modules(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its `__init__`)."""
    out = {}
    for path in (root / "mirl").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every mirl import in a file but those under `if TYPE_CHECKING:`, each named as
    the most specific module it runs (`from mirl.training import checkpoints` is mirl.training.checkpoints)."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names = subs if len(subs) == len(node.names) else [node.module, *subs]
        else:
            continue
        for name in names:
            if name == "mirl" or name.startswith("mirl."):
                while name not in known and "." in name:  # `import mirl.x.y` of a name inside a module
                    name = name.rsplit(".", 1)[0]
                found.append((node.lineno, name))
    return found


@cache
def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """module -> mirl modules it imports."""
    modules = source_modules(root)
    return {m: {t for _, t in imports_of(p, set(modules)) if t != m} for m, p in modules.items()}


def package_graph() -> dict[str, set[str]]:
    """Each unit `LAYERS` places (a package, or a module placed on its own such as mirl.runner.layout)
    -> the other units its modules import."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        unit = layer_of(module)[1]
        if unit != "mirl":
            graph[unit] |= {u for t in targets if (u := layer_of(t)[1]) not in ("mirl", unit)}
    return graph


def module_graph(package: str) -> dict[str, set[str]]:
    """module -> modules of the same package it imports, named relative to the package (`paged.engine`,
    `__init__` for the package itself)."""
    prefix = f"mirl.{package}"

    def rel(name: str) -> str:
        return name[len(prefix) + 1:] if name != prefix else "__init__"

    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        if module == prefix or module.startswith(prefix + "."):
            inside = {rel(t) for t in targets if t == prefix or t.startswith(prefix + ".")}
            if inside:
                graph[rel(module)] |= inside
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every node that reaches itself, with one path back to it."""
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path + [start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_no_package_import_cycles():
    graph = package_graph()
    found = cycles(graph)
    assert not found, f"packages on an import cycle: {found}"


PACKAGES = sorted(p.name for p in (REPO / "mirl").iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_a_package(package):
    found = cycles(module_graph(package))
    assert not found, f"import circles inside mirl.{package}: {found}"


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the prefix that places it) of a module."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    assert best is not None, f"{module} is in no layer of LAYERS: add it to the layer it belongs to"
    return best


def wrong_imports(root: Path = REPO) -> list[str]:
    """Imports that run up a layer, or from one stage package to another."""
    modules = source_modules(root)
    bad = []
    for module, path in sorted(modules.items()):
        here, mine = layer_of(module)
        for line, target in imports_of(path, set(modules)):
            there, theirs = layer_of(target)
            where = f"{path.relative_to(root)}:{line}: {module} ({LAYERS[here][0]}) imports {target}"
            if there > here:
                bad.append(f"{where} ({LAYERS[there][0]}): up a layer")
            elif there == here and mine in STAGES and theirs in STAGES and mine != theirs:
                bad.append(f"{where}: another stage's module (read its outputs through mirl.records or "
                           "mirl.runner.inputs)")
    return bad


def test_every_import_runs_down_the_layers():
    bad = wrong_imports()
    assert not bad, "\n".join(bad)


# --- the checkers themselves can fail ---------------------------------------------------------------


def test_the_checkers_see_a_circle_a_wrong_layer_and_a_stage_import(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) and not cycles({"a": {"b"}, "b": {"c"}})
    pkg = tmp_path / "mirl"
    for name, text in {"__init__.py": "", "jsonl.py": "from mirl.records import trajectory\n",
                       "records/__init__.py": "", "records/trajectory.py": "",
                       "prefixes/__init__.py": "", "prefixes/stage.py": "",
                       "training/__init__.py": "",
                       "training/stage.py": "def f():\n    from mirl.prefixes import stage\n",
                       "training/rollouts.py": "from mirl.training import stage\n"}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    bad = wrong_imports(tmp_path)
    assert len(bad) == 2 and "mirl.jsonl (base) imports mirl.records.trajectory" in bad[0] and "up a layer" in bad[0]
    assert "training/stage.py:2" in bad[1] and "another stage's module" in bad[1]
    assert import_graph(tmp_path)["mirl.training.rollouts"] == {"mirl.training.stage"}  # `from pkg import module`
