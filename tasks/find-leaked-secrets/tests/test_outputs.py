"""Checks /app/leaks.txt lists exactly the credential locations, in the required order."""

from pathlib import Path

OUT = Path("/app/leaks.txt")
EXPECTED = Path(__file__).with_name("expected.txt").read_text().split()


def lines() -> list[str]:
    assert OUT.is_file(), f"{OUT} was not created"
    return [l.strip() for l in OUT.read_text().splitlines() if l.strip()]


def test_format():
    for l in lines():
        path, _, num = l.rpartition(":")
        assert path and num.isdigit() and not path.startswith(("./", "/")), f"bad line {l!r}"


def test_same_locations():
    got = set(lines())
    assert not got - set(EXPECTED), f"not credentials: {sorted(got - set(EXPECTED))}"
    assert not set(EXPECTED) - got, f"missed: {sorted(set(EXPECTED) - got)}"


def test_no_duplicates():
    assert len(lines()) == len(set(lines()))


def test_order():
    assert lines() == EXPECTED


def test_binary_file_skipped():
    assert not any(l.startswith("assets/") for l in lines())
