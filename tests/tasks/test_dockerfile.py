"""The Dockerfile reader: continuations, ARG/ENV substitution, last stage wins, COPY flags."""

from mirl.tasks.dockerfile import copy_sources, parse, split_lines, substitute


def test_continuations_comments_and_line_numbers():
    text = "# header\nFROM base\n\nRUN apt-get update && \\\n    # a comment inside\n    apt-get install -y jq\nWORKDIR /app\n"
    ins = split_lines(text)
    assert [(i.keyword, i.line) for i in ins] == [("FROM", 2), ("RUN", 4), ("WORKDIR", 7)]
    assert ins[1].args == "apt-get update && apt-get install -y jq"


def test_env_workdir_and_stages(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text(
        "ARG TAG=3.11\nFROM python:${TAG} AS build\nWORKDIR /build\nENV A=1\n"
        "FROM debian:${TAG:-x}\nENV HOME_DIR=/srv B=\"two words\"\nENV LEGACY value with spaces\n"
        "WORKDIR $HOME_DIR\nWORKDIR app\n"
    )
    parsed = parse(df)
    assert parsed.base_image == "debian:3.11"
    assert parsed.workdir == "/srv/app"
    assert parsed.env == {"HOME_DIR": "/srv", "B": "two words", "LEGACY": "value with spaces"}


def test_copy_sources_forms():
    assert copy_sources("--chown=app:app a.txt b.txt /dest/") == (["a.txt", "b.txt"], "/dest/", {"chown": "app:app"})
    assert copy_sources('["x y.txt", "/app/"]') == (["x y.txt"], "/app/", {})


def test_substitute_defaults():
    assert substitute("${A:-d}/$B/${C}", {"B": "b"}) == "d/b/"
