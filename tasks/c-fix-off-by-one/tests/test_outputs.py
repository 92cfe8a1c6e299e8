"""The rebuilt encoder/decoder matches the specification on fresh inputs, without memory errors."""
import itertools
import random
import string
import subprocess
from pathlib import Path

APP = Path("/app")
BIN = APP / "bin" / "rle"


def encode(s):
    return "".join(f"{len(list(g))}{ch}" for ch, g in itertools.groupby(s))


def rle(tmp_path, mode, text, newline=True):
    f = tmp_path / "input.txt"
    f.write_text(text + ("\n" if newline else ""))
    out = subprocess.run([str(BIN), mode, str(f)], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, f"{mode} {text!r} exited {out.returncode}: {out.stderr[-600:]}"
    return out.stdout


def cases():
    rng = random.Random(11)
    fixed = ["a", "ab", "abc", "aaabccdddd", "zzzzzzzzzzzz", "abcdefghij", "xyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"]
    rand = []
    for _ in range(25):
        parts = [rng.choice(string.ascii_letters + " .,-") * rng.choice([1, 1, 2, 3, 9, 10, 11, 23]) for _ in range(rng.randint(1, 30))]
        rand.append("".join(parts))
    return fixed + rand


def test_sanitizer_kept_and_rebuilds():
    assert "-fsanitize=address" in (APP / "Makefile").read_text()
    r = subprocess.run(["make", "-B", "-C", str(APP)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_encode(tmp_path):
    for text in cases():
        assert rle(tmp_path, "encode", text) == encode(text) + "\n", text


def test_decode(tmp_path):
    for text in cases():
        assert rle(tmp_path, "decode", encode(text)) == text + "\n", text


def test_empty_and_missing_newline(tmp_path):
    assert rle(tmp_path, "encode", "") == "\n"
    assert rle(tmp_path, "decode", "") == "\n"
    assert rle(tmp_path, "encode", "qqqp", newline=False) == "3q1p\n"
    assert rle(tmp_path, "decode", "10k2j", newline=False) == "kkkkkkkkkkjj\n"
