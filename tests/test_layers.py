"""Packages depend one way: each imported alone pulls in only what its layer allows, and the package
graph of the whole source tree has no cycles."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# package (or module) imported alone -> mirl packages it must never pull in
FORBIDDEN = {
    "mirl.tasks": {"sandbox", "agent", "llm", "detectors", "roles", "runner", "profiling", "records"},
    "mirl.records": {"sandbox", "agent", "llm", "detectors", "roles", "profiling", "taxonomy", "prefixes"},
    "mirl.detectors": {"sandbox", "agent", "llm", "roles", "profiling"},
    "mirl.llm": {"sandbox", "agent", "detectors", "roles", "profiling", "records"},
    "mirl.runner": {"sandbox", "agent", "detectors", "roles", "profiling", "taxonomy", "prefixes"},
    "mirl.sandbox": {"agent", "llm", "detectors", "roles", "runner", "profiling"},
}


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


def package_graph() -> dict[str, set[str]]:
    """mirl package -> mirl packages its modules import (anywhere but `if TYPE_CHECKING:` blocks)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in (REPO / "mirl").rglob("*.py"):
        parts = path.relative_to(REPO / "mirl").parts
        pkg = parts[0].removesuffix(".py")
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            if isinstance(node, ast.ImportFrom) and node.module == "mirl":
                names = [f"mirl.{a.name}" for a in node.names]
            for name in names:
                if name.startswith("mirl.") and name.split(".")[1] != pkg:
                    graph[pkg].add(name.split(".")[1])
    return graph


def test_no_package_import_cycles():
    graph = package_graph()
    cycles = []
    for a in sorted(graph):
        seen, stack = set(), list(graph[a])
        while stack:
            b = stack.pop()
            if b == a:
                cycles.append(a)
                break
            if b not in seen:
                seen.add(b)
                stack.extend(graph.get(b, ()))
    assert not cycles, f"packages on an import cycle: {cycles}; graph: { {k: sorted(v) for k, v in graph.items()} }"


def test_the_checker_sees_a_cycle(tmp_path, monkeypatch):
    """The cycle check itself can fail: a graph with a -> b -> a is reported."""
    graph = {"a": {"b"}, "b": {"a"}}
    monkeypatch.setattr(sys.modules[__name__], "package_graph", lambda: graph)
    with pytest.raises(AssertionError, match="cycle"):
        test_no_package_import_cycles()
