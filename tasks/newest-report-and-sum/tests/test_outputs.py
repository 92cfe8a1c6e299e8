"""Checks two new reports were generated and the newest name / value total match the report files."""

import re
from pathlib import Path

REPORTS = Path("/app/reports")
OLD = {"report_20231102T091500123456_k3j9xa.txt", "report_20231215T174502000871_a0zz7q.txt",
       "report_20231130T080000999999_zq1b2c.txt"}
NAME = re.compile(r"report_(\d{8}T\d{12})_[a-z0-9]{6}\.txt")


def reports() -> list[Path]:
    return sorted(REPORTS.glob("report_*.txt"))


def value(p: Path) -> int:
    found = re.findall(r"^value: (\d+)$", p.read_text(), re.M)
    assert len(found) == 1, f"{p.name} must hold exactly one value line"
    return int(found[0])


def test_generator_ran_twice():
    names = {p.name for p in reports()}
    assert OLD <= names, "the old reports must be kept"
    new = names - OLD
    assert len(new) == 2, f"expected exactly 2 new reports, found {len(new)}"
    for n in new:
        assert NAME.fullmatch(n) and n > "report_2024", f"unexpected report name {n}"
        assert re.search(r"^pid: \d+$", (REPORTS / n).read_text(), re.M), f"{n} was not written by the generator"


def test_newest_name():
    newest = max(reports(), key=lambda p: NAME.fullmatch(p.name).group(1)).name
    got = Path("/app/newest.txt").read_text().strip()
    assert got == newest, f"got {got!r}, newest is {newest!r}"


def test_total():
    total = sum(value(p) for p in reports())
    got = Path("/app/total.txt").read_text().strip()
    assert got == str(total), f"got {got!r}, sum of values is {total}"
