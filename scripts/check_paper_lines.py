"""Check that every number of params/paper_reported.yaml is printed on the line of the paper's text it names.

    python scripts/check_paper_lines.py PAPER.txt [params/paper_reported.yaml]

PAPER.txt is the paper converted from its PDF to text (markitdown), the text the file's line numbers
refer to. A number counts as printed when one of its usual spellings (51.8, 51.8±0.1, 2,017, 75.9K,
10.5B, 262M, $1,960.3, -65%) appears on that line once spaces are removed. Prints each number that is
not found and exits 1 if any; 0 when all are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mirl.reported import DEFAULT, find, printed_numbers  # noqa: E402


def spellings(v: float) -> set[str]:
    """The ways the paper may print `v`."""
    out = set()
    for digits in range(0, 4):
        text = f"{v:.{digits}f}"
        if float(text) == v:
            out |= {text, f"{v:,.{digits}f}"}
    for unit, size in (("K", 1e3), ("M", 1e6), ("B", 1e9)):
        scaled = v / size
        if abs(scaled) >= 1:
            for digits in range(0, 2):
                if round(scaled, digits) == round(scaled, 3):
                    out.add(f"{scaled:.{digits}f}{unit}")
    return out | {s.replace("-", "−") for s in out}


def found(value, line: str) -> bool:
    squeezed = line.replace(" ", "")
    if isinstance(value, list):
        if len(value) == 2:  # a score: mean±se
            return any(f"{m}±{s}" in squeezed for m in spellings(value[0]) for s in spellings(value[1]))
        return all(found(x, line) for x in value)
    return any(s in squeezed for s in spellings(float(value)))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    text = Path(argv[0]).read_text(encoding="utf-8").splitlines()
    path = find(argv[1] if len(argv) > 1 else DEFAULT)
    numbers = printed_numbers(yaml.safe_load(path.read_text()), path)
    missing = [(key, value, n) for key, value, n in numbers
               if not (1 <= n <= len(text) and found(value, text[n - 1]))]
    for key, value, n in missing:
        shown = text[n - 1].strip()[:100] if 1 <= n <= len(text) else "(no such line)"
        print(f"{key} = {value!r}: not on line {n}: {shown}")
    print(f"{len(numbers) - len(missing)} of {len(numbers)} numbers found on their lines")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
