"""An offline teacher that replays a task's reference solution (`solution/solve.sh`) one step at a time.

It stands in for the teacher LLM in the embedded default: when a step is judged bad, the
correction is the next unused step of the reference solution. The script is split into its
top-level statements (heredocs, continuations and if/for/while/case/function blocks kept whole,
completeness checked with `bash -n`). Sandbox commands run in a fresh shell each (see
`mirl.sandbox.base`), so statements that only set context (`cd`, `export`, variable assignments,
`set -e`, function definitions) are not steps of their own: they are repeated as a prelude of every
later step. Statements that use a variable assigned by an earlier non-context statement are merged
with it into one step, so no step depends on shell state that a fresh shell would not have.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mirl.detectors.shell import HEREDOC_OP, classify, in_quotes, tokenize
from mirl.records.trajectory import Step
from mirl.tasks import Task

CONTEXT_PROGRAMS = frozenset("cd export set shopt umask source . alias unset pushd popd readonly declare typeset trap ulimit".split())
SILENT_PROGRAMS = frozenset("echo printf exit true : clear return".split())
_ASSIGN = re.compile(r"(?:^|[\s;&|(`])(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_]\w*)\+?=")
_READ_VARS = re.compile(r"\bread\s+(?:-[a-zA-Z]+\s+(?:\S+\s+)?)*((?:[A-Za-z_]\w*\s*)+)")
_FOR_VAR = re.compile(r"\b(?:for|select)\s+([A-Za-z_]\w*)\s+in\b")
_USE = re.compile(r"\$\{?#?([A-Za-z_]\w*)")
_FUNC_DEF = re.compile(r"^\s*(?:function\s+[A-Za-z_][\w-]*\s*(?:\(\s*\))?|[A-Za-z_][\w-]*\s*\(\s*\))\s*\{?", re.S)


class TeacherUnavailable(ValueError):
    """The task has no reference solution (or it cannot be read)."""


@dataclass(frozen=True)
class Statement:
    """One top-level statement of a script, with the comment lines right above it."""

    text: str
    comment: str = ""
    line: int = 0  # 1-based line where it starts


@dataclass(frozen=True)
class PlannedStep:
    """One replayable step: the command to run in a fresh shell and what it is for."""

    command: str
    statement: str  # the solution's own text, without the prelude
    note: str  # the comment above it in solve.sh, if any
    line: int


# --- splitting


def split_statements(script: str) -> list[Statement]:
    """Top-level statements of a bash script; shebang, blank and comment-only lines dropped."""
    if shutil.which("bash") is None:
        raise RuntimeError("bash is needed to split scripts into statements; install bash")
    out: list[Statement] = []
    buf: list[str] = []
    comments: list[str] = []
    pending: list[tuple[str, bool]] = []  # heredoc delimiters still open: (word, strip_tabs)
    start = 0
    for n, line in enumerate(script.splitlines(), 1):
        if not buf:
            stripped = line.strip()
            if not stripped:
                comments = []
                continue
            if stripped.startswith("#"):
                if not stripped.startswith("#!"):
                    comments.append(stripped.lstrip("#").strip())
                continue
            start = n
        buf.append(line)
        if pending:
            word, strip_tabs = pending[0]
            if (line.lstrip("\t") if strip_tabs else line).strip() == word:
                pending.pop(0)
            if pending:
                continue
        else:
            for m in HEREDOC_OP.finditer(line):
                if not in_quotes(line, m.start()):
                    pending.append((m.group(2) or m.group(3) or m.group(4), m.group(1) == "-"))
            if pending:
                continue
        if re.search(r"(?<!\\)(\\\\)*\\$", line):
            continue  # line continuation
        text = "\n".join(buf)
        if _complete(text):
            out.append(Statement(text=text.strip("\n"), comment=" ".join(c for c in comments if c), line=start))
            buf, comments = [], []
    if buf:
        out.append(Statement(text="\n".join(buf).strip("\n"), comment=" ".join(comments), line=start))
    return out


def _complete(text: str) -> bool:
    """False while bash would still be waiting for more input (open block, trailing && or |)."""
    proc = subprocess.run(["bash", "-n"], input=text + "\n", capture_output=True, text=True, timeout=10)
    err = proc.stderr.lower()
    if "here-document" in err:
        return False
    if proc.returncode == 0:
        return True
    return not ("unexpected end of file" in err or "unexpected eof" in err)


# --- planning


def _is_context(text: str) -> bool:
    if _FUNC_DEF.match(text) and not text.lstrip().startswith(("if ", "for ", "while ", "case ")):
        return True
    if "\n" in text or "<<" in text or "$(" in text or "`" in text:
        return False  # command substitutions run something: repeating them in every prelude is unsafe
    if any(t in {"(", ")", "|"} for t in tokenize(text)):
        return False
    cmd = classify(text)
    if not cmd.segments:
        return bool(text.strip())  # assignments only
    return all(s.program in CONTEXT_PROGRAMS and not s.writes for s in cmd.segments)


def _is_silent(text: str) -> bool:
    cmd = classify(text)
    return bool(cmd.segments) and all(s.program in SILENT_PROGRAMS and not s.writes for s in cmd.segments) and "$(" not in text


def _leading_cd(text: str) -> str:
    """`cd X` when a one-line statement starts with `cd X &&` at top level (it changes later lines' cwd)."""
    if "\n" in text or "(" in text:
        return ""
    m = re.match(r"^\s*(cd\s+[^;&|]+?)\s*(?:&&|;)", text)
    return m.group(1) if m else ""


def _assigned(text: str) -> set[str]:
    names = set(_ASSIGN.findall(text)) | set(_FOR_VAR.findall(text))
    for group in _READ_VARS.findall(text):
        names |= set(group.split())
    return names


def _used(text: str) -> set[str]:
    return set(_USE.findall(text))


def plan_steps(script: str) -> list[PlannedStep]:
    """Replayable steps of a solution script, each self-contained for a fresh shell."""
    statements = split_statements(script)
    kinds = ["context" if _is_context(s.text) else "silent" if _is_silent(s.text) else "action" for s in statements]
    # group action statements that share shell variables
    groups: list[list[int]] = []
    for idx, kind in enumerate(kinds):
        if kind != "action":
            continue
        uses = _used(statements[idx].text)
        hit = next((g for g, members in enumerate(groups) if any(_assigned(statements[m].text) & uses for m in members)), None)
        if hit is None:
            groups.append([idx])
        else:
            merged = [m for members in groups[hit:] for m in members] + [idx]
            groups[hit:] = [merged]
    notes = [s.comment for s in statements]
    for k in range(len(statements) - 1):  # a comment above `set -e` / `cd` describes what follows
        if kinds[k] != "action" and notes[k] and not notes[k + 1]:
            notes[k + 1] = notes[k]
    steps = []
    for members in groups:
        first, last = members[0], members[-1]
        prelude = []
        for k in range(first):
            if kinds[k] == "context":
                prelude.append(statements[k].text)
            elif kinds[k] == "action" and _leading_cd(statements[k].text):
                prelude.append(_leading_cd(statements[k].text))
        body = [statements[k].text for k in range(first, last + 1) if kinds[k] != "silent" or k in members]
        statement = "\n".join(body)
        steps.append(PlannedStep(command="\n".join(prelude + [statement]), statement=statement,
                                 note=notes[first], line=statements[first].line))
    return steps


# --- the role


class ReferenceTeacher:
    """Proposes the next unused step of the task's reference solution; None once all were used.

    Which steps were used is tracked per episode (the `episode` key), and also read back from the
    history: steps this teacher proposed carry `meta["reference_step"]`, so a fresh teacher given
    the same history continues where the last one stopped.
    """

    name = "reference"

    def __init__(self) -> None:
        self._plans: dict[tuple[str, float], list[PlannedStep]] = {}
        self._next: dict[str, int] = {}

    def plan(self, task: Task) -> list[PlannedStep]:
        if task.solution is None:
            raise TeacherUnavailable(f"task {task.id} has no reference solution (solution/solve.sh)")
        path = Path(task.solution)
        try:
            key = (str(path), path.stat().st_mtime)
            if key not in self._plans:
                self._plans[key] = plan_steps(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as e:
            raise TeacherUnavailable(f"task {task.id}: cannot read {path}: {e.strerror or e}") from None
        return self._plans[key]

    def propose(self, task: Task, history: list[Step], episode: str | None = None) -> Step | None:
        steps = self.plan(task)
        done = [s.meta.get("reference_step") for s in history if isinstance(s.meta.get("reference_step"), int)]
        k = max([self._next.get(episode, 0) if episode is not None else 0] + [d + 1 for d in done])
        if k >= len(steps):
            return None
        if episode is not None:
            self._next[episode] = k + 1
        planned = steps[k]
        what = planned.note or planned.statement.splitlines()[0]
        return Step(
            reasoning=f"Following the reference solution (step {k + 1} of {len(steps)}): {what}",
            command=planned.command,
            source="teacher",
            meta={"teacher": self.name, "reference_step": k, "reference_total": len(steps)},
        )

    def reset(self, episode: str | None = None) -> None:
        """Forget the progress of one episode (all episodes when None)."""
        if episode is None:
            self._next.clear()
        else:
            self._next.pop(episode, None)


__all__ = ["PlannedStep", "ReferenceTeacher", "Statement", "TeacherUnavailable", "plan_steps", "split_statements"]
