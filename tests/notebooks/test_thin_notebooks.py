"""The stage notebooks hold calls and short displays only: no function or class defined in a cell, no
loop over data, no arithmetic (a path join `dir / "file.csv"` aside), no branch statement, no reshaping
of tables (group, merge, concat, pivot, ...), no rows picked by a computed mask, no list of column
names. What a cell would compute belongs in `mirl/`, where it is tested and reused; the notebook
shows it. The parameters cell (literal values papermill overrides) is not read."""

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


RESHAPES = {"groupby", "merge", "concat", "join", "pivot", "pivot_table", "unstack", "stack", "melt", "value_counts",
            "apply", "agg", "aggregate", "query", "crosstab"}


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
        elif isinstance(node, ast.If):
            out.append(f"branches: {seg}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RESHAPES \
                and not isinstance(node.func.value, ast.Constant):  # "\n".join(lines) is no table
            out.append(f"reshapes a table: {seg}")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
            out.append(f"picks rows by a mask: {seg}")
        elif isinstance(node, (ast.List, ast.Tuple)) and sum(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts) > 3:
            out.append(f"lists columns: {seg}")
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_hold_calls_and_displays_only(path):
    cells = [c for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "code" and "parameters" not in c.get("metadata", {}).get("tags", [])]
    found = [f"cell {i}: {p}" for i, c in enumerate(cells) for p in problems("".join(c["source"]))]
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_the_rule_sees_each_kind():
    assert problems("def f(x):\n    return x\n")[0].startswith("defines FunctionDef")
    assert problems("for r in rows:\n    show(r)\n")[0].startswith("loops")
    assert problems("[r['rate'] for r in rows]")[0].startswith("loops over data")
    assert problems("{k: v * 2 for k, v in d.items()}")[0].startswith("loops over data")
    assert problems("hours = seconds / 3600")[0].startswith("computes")
    assert problems("total += x")[0].startswith("computes")
    assert problems("if len(red):\n    save(red)\n")[0].startswith("branches")
    assert problems("j.groupby(['a'])['b'].sum()")[0].startswith("reshapes a table")
    assert problems("pd.concat([a, b])")[0].startswith("reshapes a table")
    assert problems("df[df['source'] == 'run']")[0].startswith("picks rows by a mask")
    assert problems("t[['run', 'phase', 'rollouts', 'gpu_hours']]")[0].startswith("lists columns")
    assert problems("df.to_csv(report_dir / 'x.csv')\n{k: v for k, v in s.items() if k != 'llm'}\n"
                    "red if len(red) else 'nothing to compare'\nt[['run', 'phase']]") == []
