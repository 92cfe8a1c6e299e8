"""The rubric writer of the RaR+ baseline: weighted items a judge rates a rollout against.

A rubric has 7-20 items, each of one kind, a weight and, optionally, a machine check:

- Essential: the task is not done without it (weight about 5); Important (3-4); Optional (good
  practice, 1-2): weights from 1 to 5, as RaR's writer gives them;
- Pitfall: a mistake to avoid, phrased as the mistake, weighted -1 or -2 (RaR's rule, which the paper's
  RaR+ writer keeps): a pitfall that happens takes its weight off;
- `check`: "command:<regex>" or "output:<regex>", a Python regex searched in each of the agent's
  commands (or outputs); the offline judge (`mirl.roles.rubric_judge.RuleRubricJudge`) rates by
  these, an LLM judge reads the item's text.

Items must be checkable from the agent's commands and their outputs alone, never about the hidden
tests, and never reward length. `tests_weight` (w, in [0.5, 1]) is the share of the reward the
tests carry: reward = w * r_o + (1 - w) * (rating - 1) / 9 (`mirl.training.rubric_reward`).

Two writers: `LLMRubricWriter` (role "rubric_writer": sees the task, its reference solution and the
test files, replies in JSON, re-asked when invalid) and offline `ReferenceRubricWriter`, a simple
stand-in built from the reference solution's commands so that the baseline runs without API keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirl.tasks import Task

ROLE = "rubric_writer"
KINDS = ("Essential", "Important", "Optional", "Pitfall")
MIN_ITEMS, MAX_ITEMS = 7, 20
MIN_TESTS_WEIGHT, MAX_TESTS_WEIGHT = 0.5, 1.0
MIN_WEIGHT, MAX_WEIGHT = 1.0, 5.0  # Essential, Important, Optional
PITFALL_WEIGHTS = (-1.0, -2.0)
CHECK_PLACES = ("command", "output")
MAX_SOLUTION_CHARS = 8000
MAX_TEST_FILE_CHARS = 4000
MAX_TESTS_CHARS = 12000


class RubricInvalid(ValueError):
    """A rubric (or a record of one) that breaks the rules; the message lists every problem."""


def parse_check(check: str) -> tuple[str, re.Pattern[str]] | None:
    """("command" | "output", compiled regex) of a check, None for no check; ValueError when malformed."""
    if not check:
        return None
    place, sep, pattern = check.partition(":")
    if not sep or place not in CHECK_PLACES:
        raise ValueError(f"check {check[:60]!r} must start with 'command:' or 'output:'")
    if not pattern:
        raise ValueError(f"check {check[:60]!r} has an empty regex")
    try:
        return place, re.compile(pattern, re.MULTILINE)
    except re.error as e:
        raise ValueError(f"check {check[:60]!r} is not a valid regex: {e}") from None


@dataclass(frozen=True)
class RubricItem:
    text: str
    weight: float
    kind: str  # one of KINDS
    check: str = ""  # "command:<regex>" | "output:<regex>" | "" (module docstring)

    def problems(self) -> list[str]:
        out = []
        if not isinstance(self.text, str) or not self.text.strip():
            out.append("text is empty")
        if self.kind not in KINDS:
            out.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not math.isfinite(self.weight):
            out.append(f"weight must be a number, got {self.weight!r}")
        elif self.kind == "Pitfall" and self.weight not in PITFALL_WEIGHTS:
            out.append(f"a Pitfall's weight must be -1 or -2, got {self.weight!r}")
        elif self.kind != "Pitfall" and not MIN_WEIGHT <= self.weight <= MAX_WEIGHT:
            out.append(f"an {self.kind} item's weight must be from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}, got {self.weight!r}")
        if not isinstance(self.check, str):
            out.append(f"check must be a string, got {type(self.check).__name__}")
        else:
            try:
                parse_check(self.check)
            except ValueError as e:
                out.append(str(e))
        return out


def rubric_problems(items: Iterable[RubricItem], tests_weight: Any) -> list[str]:
    """Every rule the items and the tests weight break (empty = a valid rubric)."""
    items = list(items)
    out = []
    if not MIN_ITEMS <= len(items) <= MAX_ITEMS:
        out.append(f"a rubric needs {MIN_ITEMS} to {MAX_ITEMS} items, got {len(items)}")
    for k, item in enumerate(items):
        out += [f"item {k} ({str(item.text)[:40]!r}): {p}" for p in item.problems()]
    if isinstance(tests_weight, bool) or not isinstance(tests_weight, (int, float)) \
            or not MIN_TESTS_WEIGHT <= tests_weight <= MAX_TESTS_WEIGHT:
        out.append(f"tests_weight must be a number in [{MIN_TESTS_WEIGHT}, {MAX_TESTS_WEIGHT}], got {tests_weight!r}")
    return out


@dataclass(frozen=True)
class Rubric:
    task: str
    items: tuple[RubricItem, ...]
    tests_weight: float
    source: str = ""  # "llm:<model>" | "reference"
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))
        problems = rubric_problems(self.items, self.tests_weight)
        if problems:
            raise RubricInvalid(f"rubric of task {self.task!r}: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any, where: str = "") -> Rubric:
        """A rubric from its record; `where` (a file and line) leads every error message."""
        head = f"{where}: " if where else ""
        if not isinstance(d, Mapping):
            raise RubricInvalid(f"{head}a rubric record must be a JSON object, got {type(d).__name__}")
        missing = [k for k in ("task", "items", "tests_weight") if k not in d]
        if missing:
            raise RubricInvalid(f"{head}the rubric record lacks {', '.join(missing)}")
        if not isinstance(d["items"], list):
            raise RubricInvalid(f"{head}items must be a list, got {type(d['items']).__name__}")
        items = []
        for k, raw in enumerate(d["items"]):
            if not isinstance(raw, Mapping) or not {"text", "weight", "kind"} <= set(raw):
                raise RubricInvalid(f"{head}item {k} must be an object with text, weight and kind, got {raw!r:.80}")
            items.append(RubricItem(text=raw["text"], weight=raw["weight"], kind=raw["kind"],
                                    check=raw.get("check") or ""))
        try:
            return cls(task=str(d["task"]), items=tuple(items), tests_weight=d["tests_weight"],
                       source=str(d.get("source", "")), meta=dict(d.get("meta") or {}))
        except RubricInvalid as e:
            raise RubricInvalid(f"{head}{e}") from None


def save_rubrics(path: str | Path, rubrics: Iterable[Rubric]) -> None:
    """One rubric per line (JSONL), replacing the file."""
    import json

    Path(path).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rubrics), encoding="utf-8")


def load_rubrics(path: str | Path) -> dict[str, Rubric]:
    """Task id -> rubric from a JSONL file; a bad line is an error naming the file and line."""
    import json

    out = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise RubricInvalid(f"{path}:{n}: not JSON: {e}") from None
        rubric = Rubric.from_dict(d, where=f"{path}:{n}")
        out[rubric.task] = rubric
    return out


# --- the LLM writer ---------------------------------------------------------------------------------

WRITER_SYSTEM = f"""You write grading rubrics for an agent that works on a task in a Linux terminal, \
one shell command at a time. A judge will rate the agent's work from 1 to 10 against your rubric, \
seeing only the commands the agent ran and their outputs: not the files, not the tests.

You see the task, a reference solution and the task's tests. The tests are hidden from the agent \
and run after it finishes; they are shown to you only so that your rubric agrees with them.

Write {MIN_ITEMS} to {MAX_ITEMS} items. Each item is one statement about what the agent's commands \
do or what their outputs show, with a kind and a weight:
- Essential (weight 5): the task is not done without it;
- Important (3-4): clearly part of doing the task well;
- Optional (1-2): good practice, such as looking at inputs first or checking the result;
- Pitfall (-1, or -2 for the worse ones): a mistake agents often make on this task, phrased as the \
mistake ("Deletes /app/data.txt"); it counts against the work when it happens.
Rules:
- Every item must be checkable from the commands and outputs alone.
- Never write items about the hidden tests: do not name test files or test functions and do not \
require running them.
- Never reward length: no credit for many steps, long explanations or checks for their own sake.
- An item may carry a `check` that decides it mechanically: "command:<regex>" or "output:<regex>", \
a Python regex searched in each command (or output). Leave it out when no regex can decide it.

Also give tests_weight, a number from {MIN_TESTS_WEIGHT} to {MAX_TESTS_WEIGHT}: the share of the reward the \
tests' pass/fail carries (high when the tests capture the task well, lower when qualities the tests \
miss matter).

Think briefly (at most 150 words), then end with one JSON object and nothing after it:
{{"items": [{{"text": "...", "kind": "Essential", "weight": 5, "check": "command:..."}}, ...], "tests_weight": 0.8}}"""

WRITER_USER = """## Task
{instruction}

## Reference solution
```bash
{solution}
```

## Tests (hidden from the agent)
{tests}"""

ITEM_SCHEMA = {"type": "object", "required": ["text", "kind", "weight"],
               "properties": {"text": {"type": "string"}, "kind": {"type": "string", "enum": list(KINDS)},
                              "weight": {"type": "number"}, "check": {"type": ["string", "null"]}}}
SCHEMA = {"type": "object", "required": ["items", "tests_weight"],
          "properties": {"items": {"type": "array", "minItems": MIN_ITEMS, "maxItems": MAX_ITEMS, "items": ITEM_SCHEMA},
                         "tests_weight": {"type": "number"}}}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


def task_test_files(task: Task) -> dict[str, str]:
    """Relative name -> text of the task's test files (binary files left out)."""
    root = Path(task.tests_dir)
    paths = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    script = Path(task.test_script)
    if script.is_file() and script not in paths:
        paths.append(script)
    out = {}
    for p in paths:
        text = _read_text(p)
        if text is not None:
            out[str(p.relative_to(task.path)) if p.is_relative_to(task.path) else p.name] = text
    return out


def hidden_names(tests: Mapping[str, str]) -> set[str]:
    """Names an item must not mention: the test files and the test functions in them."""
    names = {Path(name).name.lower() for name in tests}
    for text in tests.values():
        names |= {m.lower() for m in re.findall(r"\bdef\s+(test_\w+)", text)}
    return names


def reply_problems(value: Mapping[str, Any], hidden: set[str]) -> list[str]:
    """What the schema cannot say about a writer's reply: the rubric rules and hidden-test names."""
    items = [RubricItem(text=i.get("text", ""), weight=i.get("weight", 0), kind=i.get("kind", ""),
                        check=i.get("check") or "") for i in value.get("items", [])]
    out = rubric_problems(items, value.get("tests_weight"))
    for k, item in enumerate(items):
        said = f"{item.text} {item.check}".lower()
        named = sorted(n for n in hidden if n in said)
        if named:
            out.append(f"item {k} names the hidden tests ({', '.join(named)}); write items about the agent's "
                       "commands and outputs instead")
    return out


class LLMRubricWriter:
    """The writer as an LLM role; an invalid reply is re-asked with what was wrong (the client's
    `complete_json`), and after `tries` asks `LLMError(kind="invalid_json")` is raised."""

    def __init__(self, client: Any, role: str = ROLE, tries: int | None = None):
        self.client, self.role, self.tries = client, role, tries

    def messages(self, task: Task) -> list[dict[str, str]]:
        solution = _read_text(Path(task.solution)) if task.solution else None
        tests = task_test_files(task)
        shown, budget = [], MAX_TESTS_CHARS
        for name, text in tests.items():
            text = _cut(text, min(MAX_TEST_FILE_CHARS, max(budget, 200)))
            budget -= len(text)
            shown.append(f"### {name}\n```\n{text.rstrip()}\n```")
        user = WRITER_USER.format(instruction=task.instruction.strip(),
                                  solution=_cut(solution.strip(), MAX_SOLUTION_CHARS) if solution else "(none given)",
                                  tests="\n\n".join(shown) or "(none given)")
        return [{"role": "system", "content": WRITER_SYSTEM}, {"role": "user", "content": user}]

    def write(self, task: Task) -> Rubric:
        hidden = hidden_names(task_test_files(task))
        value = self.client.complete_json(self.role, self.messages(task), SCHEMA, tries=self.tries,
                                          check=lambda v: reply_problems(v, hidden))
        items = tuple(RubricItem(text=i["text"].strip(), weight=float(i["weight"]), kind=i["kind"],
                                 check=i.get("check") or "") for i in value["items"])
        model = self.client.config.role(self.role).model
        return Rubric(task=task.id, items=items, tests_weight=float(value["tests_weight"]), source=f"llm:{model}")


# --- the offline writer -----------------------------------------------------------------------------

OFFLINE_TESTS_WEIGHT = 0.8
WEIGHTS = {"Essential": 5.0, "Important": 3.0, "Optional": 1.0, "Pitfall": -2.0}
MAX_FILES, MAX_PROGRAMS, MAX_INPUTS = 6, 5, 3
# programs whose name says nothing about how the task was solved
PLAIN_PROGRAMS = frozenset("cat ls pwd head tail less more tree file stat sleep seq clear echo printf test".split())
WRITE_VERBS = (r"(?:>|\btee\b|\btouch\b|\bmkdir\b|\bcp\b|\bmv\b|\bln\b|\binstall\b|\btruncate\b|\bchmod\b|\bchown\b"
               r"|\bchgrp\b|\bsed\b|\bgzip\b|\btar\b|\bopen\(|write_text|write_bytes)")
# a Python script or an SQL heredoc may name the file lines away from where it writes it
SCRIPT_WRITE_VERBS = (r"(?:\bopen\(|\.write_text\(|\.write_bytes\("
                      r"|(?i:\b(?:ALTER|UPDATE|INSERT|CREATE|DELETE|DROP|REPLACE)\s+(?:TABLE|INTO|FROM|INDEX|VIEW|\w+\s+SET)\b))")
READ_VERBS = r"\b(?:cat|head|tail|less|wc|diff|cmp|grep|ls|stat|file|jq|sha256sum|md5sum|xxd|od)\b"
_PY_WRITES = re.compile(r"""(?:open\(\s*["']([^"'$]+)["']\s*,\s*["'][wax]|Path\(\s*["']([^"'$]+)["']\s*\)\s*\.write_(?:text|bytes))""")
_STDIN = re.compile(r"(?<![<\d])<\s*([^\s<>;&|()]+)")
PITFALLS = (
    ("Deletes recursively at the root, the home directory or a bare wildcard (rm -rf /, ~, *)",
     r"command:\brm\s+(?:-\w+\s+)*(?:/|~|\*|\./\*|/\*)(?:\s|$)"),
    ("Kills processes by a broad name or all of them (pkill, killall, kill -9 -1)",
     r"command:\b(?:pkill|killall)\b|\bkill\s+-9\s+-1\b"),
    ("Opens permissions to everyone (chmod 777, a+rwx)", r"command:\bchmod\s+(?:-\w+\s+)*(?:0?777|a\+rwx)\b"),
    ("Runs a program that is not installed (the output says `command not found`)", r"output:command not found"),
    ("Acts on a path that does not exist (the output says `No such file or directory`)",
     r"output:No such file or directory"),
)


def _pathlike(word: str) -> bool:
    return bool(word) and "$" not in word and "`" not in word and ("/" in word or "." in word) \
        and not word.startswith("/dev/") and re.fullmatch(r"[\w./~*?\[\]+@%-]+", word) is not None


def _named(path: str) -> str:
    """The part of a path an agent's command would spell the same: its base name, or for a glob
    the directory above the first wildcard."""
    parts = path.rstrip("/").split("/")
    cut = next((k for k, p in enumerate(parts) if any(c in p for c in "*?[")), None)
    if cut is not None:
        parts = parts[:cut]
    return parts[-1] if parts and parts[-1] not in ("", ".", "..", "~") else ""


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _sed_files(args: tuple[str, ...]) -> list[str]:
    """The files of a sed call: its operands after the script (the script comes by -e/-f or first)."""
    out, script_given, skip = [], False, False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-e", "-f", "--expression", "--file"):
            script_given = skip = True
            continue
        if a.startswith("-"):
            continue
        if not script_given:
            script_given = True
            continue
        out.append(a)
    return out


_SQL_WRITES = re.compile(r"\b(?:ALTER|UPDATE|INSERT|CREATE|DELETE|DROP|REPLACE)\b", re.IGNORECASE)


def _written(statement: str) -> list[str]:
    from mirl.detectors.shell import classify, file_operands, strip_heredocs

    bodies = strip_heredocs(statement)[1]
    out = []
    for seg in classify(statement).segments:
        out += list(seg.writes)
        ops = file_operands(seg)
        if seg.program in {"cp", "mv", "ln", "install"}:
            out += ops[-1:]
        elif seg.program in {"touch", "mkdir", "truncate", "chmod", "chown", "chgrp"}:
            out += ops  # modes and owners are not path-like and drop out below
        elif seg.program == "sed" and seg.kind == "write":
            out += _sed_files(seg.args)
        elif seg.program == "sqlite3" and ops and _SQL_WRITES.search(" ".join(seg.args[1:]) + " ".join(bodies)):
            out += ops[:1]
    for body in bodies:
        out += [a or b for a, b in _PY_WRITES.findall(body)]
        if re.search(r"\.write_(?:text|bytes)\(", body):
            out += re.findall(r"""Path\(\s*["']([^"'$]+)["']\s*\)""", body)
    return [p for p in out if _pathlike(p)]


def _read(statement: str) -> list[str]:
    from mirl.detectors.shell import READ, classify, file_operands, strip_heredocs

    out = list(_STDIN.findall(strip_heredocs(statement)[0]))
    for seg in classify(statement).segments:
        if seg.kind == READ:
            out += _sed_files(seg.args) if seg.program == "sed" else file_operands(seg)
    return [p for p in out if _pathlike(p)]


def _programs(statement: str) -> list[str]:
    from mirl.detectors.shell import NEUTRAL, classify

    return [s.program for s in classify(statement).segments
            if s.kind != NEUTRAL and s.program not in PLAIN_PROGRAMS and re.fullmatch(r"[A-Za-z_][\w.+-]*", s.program)]


def _program_regex(program: str) -> str:
    name = re.escape(program)
    if re.fullmatch(r"python3?", program):
        name = r"python3?"
    return rf"command:(?:^|[\s;&|(`/]){name}(?:\s|$)"


class ReferenceRubricWriter:
    """A stand-in rubric from the reference solution's commands, for runs without API keys.

    It reads `solution/solve.sh` and writes: Essential, a command writes each file the solution
    writes (redirections, tee, cp/mv/touch/mkdir targets, files a sed -i or chmod changes, files a
    Python heredoc opens for writing); Important, the agent runs each program the solution relies
    on; Optional, it mentions the files the solution reads, looks at files with a read-only
    command, reads back a file it wrote; Pitfall, broadly destructive commands and programs that
    are not installed, leaving out any the solution itself would trip. Every item carries a check
    for `RuleRubricJudge`. It knows only what the text of the commands shows: a file written by a
    program's own logic, or a task solved another way, is invisible to it. `tests_weight` is a fixed
    0.8, since this rubric is far weaker than the tests.
    """

    name = "reference"

    def __init__(self, tests_weight: float = OFFLINE_TESTS_WEIGHT):
        self.tests_weight = tests_weight

    def write(self, task: Task) -> Rubric:
        from mirl.roles.reference_teacher import TeacherUnavailable, split_statements

        if task.solution is None:
            raise TeacherUnavailable(f"task {task.id} has no reference solution (solution/solve.sh) to build a rubric from")
        script = _read_text(Path(task.solution))
        if script is None:
            raise TeacherUnavailable(f"task {task.id}: cannot read {task.solution} as text")
        statements = [s.text for s in split_statements(script)]
        written = _unique(_named(p) for s in statements for p in _written(s))[:MAX_FILES]
        programs = _unique(p for s in statements for p in _programs(s))[:MAX_PROGRAMS]
        inputs = [n for n in _unique(_named(p) for s in statements for p in _read(s)) if n not in written][:MAX_INPUTS]

        items = [RubricItem(f"A command writes or creates `{name}`", WEIGHTS["Essential"], "Essential",
                            rf"command:{WRITE_VERBS}[^\n]*{re.escape(name)}|(?s:(?=.*{SCRIPT_WRITE_VERBS}).*{re.escape(name)})")
                 for name in written]
        items += [RubricItem(f"Runs `{p}`, as the reference solution does", WEIGHTS["Important"], "Important",
                             _program_regex(p)) for p in programs]
        items += [RubricItem(f"A command reads or names the input `{name}`", WEIGHTS["Optional"], "Optional",
                             rf"command:{re.escape(name)}") for name in inputs]
        items.append(RubricItem("Looks at files with a read-only command (ls, cat, head, ...)", WEIGHTS["Optional"],
                                "Optional", r"command:^\s*(?:ls|cat|head|tail|less|file|stat|wc|find|tree)\b"))
        if written:
            names = "|".join(re.escape(n) for n in written)
            items.append(RubricItem("Reads back a file it wrote (cat, head, wc, diff, ...)", WEIGHTS["Optional"],
                                    "Optional", rf"command:{READ_VERBS}[^\n|;&>]*(?:{names})"))
        for text, check in PITFALLS:
            place, regex = parse_check(check)
            if place == "command" and any(regex.search(s) for s in statements):
                continue  # the solution does it: not a mistake in this task
            items.append(RubricItem(text, WEIGHTS["Pitfall"], "Pitfall", check))
        return Rubric(task=task.id, items=tuple(items[:MAX_ITEMS]), tests_weight=self.tests_weight, source="reference",
                      meta={"solution": str(task.solution)})
