"""The stage notebooks hold calls and short displays only: no function or class defined in a cell, no
loop over data, no arithmetic (a path join `dir / "file.csv"` aside). What a cell would compute
belongs in `mirl/`, where it is tested and reused; the notebook shows it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _is_filter(node: ast.DictComp) -> bool:
    """`{k: v for k, v in d.items() if ...}`: the display of a dict without some keys."""
    gen = node.generators[0] if len(node.generators) == 1 else None
    return (gen is not None and isinstance(node.key, ast.Name) and isinstance(node.value, ast.Name)
            and isinstance(gen.target, ast.Tuple) and [getattr(e, "id", None) for e in gen.target.elts]
            == [node.key.id, node.value.id])


def _is_path_join(node: ast.BinOp) -> bool:
    return isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)


def problems(source: str) -> list[str]:
    """What a cell does that a thin notebook must not."""
    out = []
    for node in ast.walk(ast.parse(source)):
        seg = (ast.get_source_segment(source, node) or "").splitlines()[0][:70] if hasattr(node, "lineno") else ""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            out.append(f"defines {type(node).__name__}: {seg}")
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            out.append(f"loops: {seg}")
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) or (
                isinstance(node, ast.DictComp) and not _is_filter(node)):
            out.append(f"loops over data: {seg}")
        elif isinstance(node, ast.AugAssign) or (isinstance(node, ast.BinOp) and not _is_path_join(node)):
            out.append(f"computes: {seg}")
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_hold_calls_and_displays_only(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    found = [f"cell {i}: {p}" for i, c in enumerate(cells) for p in problems("".join(c["source"]))]
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_the_rule_sees_each_kind():
    assert problems("def f(x):\n    return x\n")[0].startswith("defines FunctionDef")
    assert problems("for r in rows:\n    show(r)\n")[0].startswith("loops")
    assert problems("[r['rate'] for r in rows]")[0].startswith("loops over data")
    assert problems("{k: v * 2 for k, v in d.items()}")[0].startswith("loops over data")
    assert problems("hours = seconds / 3600")[0].startswith("computes")
    assert problems("total += x")[0].startswith("computes")
    assert problems("df.to_csv(report_dir / 'x.csv')\n{k: v for k, v in s.items() if k != 'llm'}") == []
