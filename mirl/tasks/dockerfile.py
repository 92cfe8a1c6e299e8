"""A small Dockerfile reader: enough to know the base image, WORKDIR, ENV, COPY/ADD and RUN lines.

The sandboxes need these facts without a Docker engine (bubblewrap applies COPY/ADD, WORKDIR and
ENV itself), so we parse the file rather than ask a builder. Continuation lines, comments, the JSON
and shell forms, `ARG` defaults and `$VAR` / `${VAR}` substitution are handled; heredocs are not.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, with its 1-based line number for error messages."""

    keyword: str  # upper-case: FROM, RUN, COPY, ...
    args: str  # the raw text after the keyword, continuations joined
    line: int


@dataclass
class Dockerfile:
    path: Path
    instructions: list[Instruction]
    base_image: str = ""
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def substitute(text: str, variables: dict[str, str]) -> str:
    """Replace $VAR, ${VAR} and ${VAR:-default} the way Docker's builder does."""

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        return m.group(2) if m.group(2) is not None else ""

    return _VAR.sub(repl, text)


def split_lines(text: str) -> list[Instruction]:
    """Join continuation lines, drop comments and blanks, keep the line each instruction started on."""
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comments inside a continued instruction are ignored by Docker too
        if not buf:
            start = n
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        joined = " ".join(part.strip() for part in buf if part.strip())
        buf = []
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    if buf:
        joined = " ".join(part.strip() for part in buf if part.strip())
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    return out


def exec_form(args: str) -> list[str] | None:
    """The JSON (exec) form of an instruction's arguments, or None for the shell form."""
    if args.startswith("["):
        try:
            value = json.loads(args)
        except json.JSONDecodeError:
            return None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return None


def parse_env(args: str) -> dict[str, str]:
    """ENV KEY=VALUE [KEY=VALUE...] or the legacy ENV KEY VALUE."""
    try:
        parts = shlex.split(args)
    except ValueError:
        parts = args.split()
    if parts and "=" not in parts[0]:
        return {parts[0]: args[len(parts[0]):].strip()} if parts else {}
    result = {}
    for part in parts:
        key, _, value = part.partition("=")
        result[key] = value
    return result


def copy_sources(args: str) -> tuple[list[str], str, dict[str, str]]:
    """Split COPY/ADD args into (sources, destination, flags such as --chown/--chmod/--from)."""
    flags: dict[str, str] = {}
    form = exec_form(args)
    if form is None:
        try:
            parts = shlex.split(args)
        except ValueError:
            parts = args.split()
    else:
        parts = form
    while parts and parts[0].startswith("--"):
        key, _, value = parts.pop(0)[2:].partition("=")
        flags[key] = value
    if len(parts) < 2:
        return [], parts[0] if parts else "", flags
    return parts[:-1], parts[-1], flags


def from_image(args: str) -> str:
    """The image of `FROM [--platform=...] IMAGE [AS name]`: flags come before the image and are not it."""
    words = [w for w in args.split() if not w.startswith("--")]
    return words[0] if words else ""


def parse(path: Path) -> Dockerfile:
    """Read a Dockerfile; the last stage's FROM, WORKDIR and ENV win, as for the built image."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    instructions = split_lines(text)
    df = Dockerfile(path=Path(path), instructions=instructions)
    variables: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            variables.setdefault(name.strip(), default.strip().strip('"'))
        elif ins.keyword == "FROM":
            image = substitute(from_image(ins.args), variables)
            df.base_image, df.workdir, df.env = image, "/", {}
        elif ins.keyword == "ENV":
            for key, value in parse_env(ins.args).items():
                value = substitute(value, {**variables, **df.env})
                df.env[key] = value
        elif ins.keyword == "WORKDIR":
            target = substitute(ins.args.strip().strip('"'), {**variables, **df.env})
            df.workdir = target if target.startswith("/") else str(Path(df.workdir) / target)
    return df
