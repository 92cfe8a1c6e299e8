"""Checks /app/.env is the flattened, sorted form of /app/config.yaml."""

from pathlib import Path

OUT = Path("/app/.env")
EXPECTED = Path(__file__).with_name("expected.env").read_text().splitlines()


def lines() -> list[str]:
    assert OUT.is_file(), f"{OUT} was not created"
    return OUT.read_text().splitlines()


def as_dict(ls: list[str]) -> dict[str, str]:
    return dict(l.split("=", 1) for l in ls if "=" in l)


def test_no_blank_or_comment_lines():
    assert all(l and not l.startswith("#") and "=" in l for l in lines())


def test_same_keys():
    assert set(as_dict(lines())) == set(as_dict(EXPECTED))


def test_values():
    got, want = as_dict(lines()), as_dict(EXPECTED)
    wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    assert not wrong, f"key: (got, expected) {wrong}"


def test_sorted_exactly():
    assert lines() == EXPECTED
