"""Checks every file in /app/texts has LF endings, no BOM, and otherwise unchanged content."""

from pathlib import Path

import pytest

TEXTS = Path("/app/texts")
EXPECTED = Path(__file__).with_name("expected")
NAMES = sorted(p.name for p in EXPECTED.iterdir())


def test_same_file_names():
    assert sorted(p.name for p in TEXTS.iterdir()) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_no_cr_no_bom(name):
    data = (TEXTS / name).read_bytes()
    assert b"\r" not in data, f"{name} still has CR characters"
    assert not data.startswith(b"\xef\xbb\xbf"), f"{name} still starts with a BOM"


@pytest.mark.parametrize("name", NAMES)
def test_content_preserved(name):
    assert (TEXTS / name).read_bytes() == (EXPECTED / name).read_bytes()
