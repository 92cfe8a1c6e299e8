"""Restore a recorded prefix in a fresh session by re-running its commands one by one.

A prefix is only a faithful starting point if the environment ends up where the original agent
left it; the best evidence we have is that every command prints what it printed then. Exact
equality is too strict for outputs with timestamps, PIDs, temp names or timings, so a normalized
comparison is recorded beside it and callers choose which one to require.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from mirl.records.trajectory import Step
from mirl.sandbox.base import Session

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# (name, pattern, replacement): volatile tokens that differ between two runs of the same command
MASKS = [
    ("datetime", re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<DATETIME>"),
    ("datetime", re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b[^\n]{0,40}\b\d{1,2}:\d{2}(:\d{2})?\b[^\n]{0,12}\d{4}"), "<DATETIME>"),
    ("date", re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+(\d{1,2}:\d{2}|\d{4})\b"), "<DATE>"),
    ("time", re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<TIME>"),
    ("address", re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    ("hex id", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b"), "<HASH>"),
    ("temp name", re.compile(r"/tmp/[\w.-]+"), "/tmp/<TMP>"),
    ("duration", re.compile(r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds|µs|us|ns|MB/s|kB/s|KB/s|GB/s|B/s)\b"), "<DURATION>"),
    ("pid", re.compile(r"\b(pid|PID|process)\s*[=:]?\s*\d+\b"), r"\1 <PID>"),
    ("progress", re.compile(r"\[[=#>.\- ]{3,}\]|\b\d{1,3}(\.\d+)?%"), "<PROGRESS>"),
]
# commands whose output IS the content of files: a digest that differs is a real divergence, never volatile
_DIGESTS = re.compile(r"\b(md5sum|sha\d*sum|b2sum|cksum|shasum|git\s+(hash-object|rev-parse|log|show))\b")


def _masks_for(command: str | None) -> list[tuple[str, re.Pattern, str]]:
    if command and _DIGESTS.search(command):
        return [m for m in MASKS if m[0] != "hex id"]
    return MASKS


def normalize_output(text: str, command: str | None = None) -> str:
    """Output with volatile parts (times, ids, temp names, durations, spacing) masked. For commands that
    print file digests, hex ids are left alone: there they decide, they are not noise."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    for _, pattern, repl in _masks_for(command):
        text = pattern.sub(repl, text)
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


def masks_applied(text: str, command: str | None = None) -> set[str]:
    """Names of the masks that change `text` (what normalisation had to hide)."""
    text = _ANSI.sub("", text)
    return {name for name, pattern, _ in _masks_for(command) if pattern.search(text)}


def short_diff(recorded: str, rerun: str, lines: int = 8) -> str:
    import difflib

    diff = difflib.unified_diff(recorded.splitlines(), rerun.splitlines(), "recorded", "rerun", lineterm="", n=0)
    return "\n".join([line for line in list(diff)[2:] if not line.startswith("@@")][:lines])


@dataclass
class RestoreReport:
    steps: list[dict[str, Any]] = field(default_factory=list)  # per prefix step: exact, normalized, ...
    sandbox_s: float = 0.0

    @property
    def exact(self) -> bool:
        return all(s["exact"] for s in self.steps)

    @property
    def normalized(self) -> bool:
        return all(s["normalized"] for s in self.steps)

    def summary(self) -> dict[str, Any]:
        return {"n": len(self.steps), "exact": self.exact, "normalized": self.normalized,
                "exact_steps": sum(s["exact"] for s in self.steps),
                "normalized_steps": sum(s["normalized"] for s in self.steps),
                "first_mismatch": next((i for i, s in enumerate(self.steps) if not s["normalized"]), None)}


def restore_prefix(session: Session, prefix: list[Step], timeout: float | None = None,
                   keep_output_chars: int = 2000, rerun: bool = True) -> tuple[list[Step], RestoreReport]:
    """Re-run each prefix command; return the prefix as steps with source="prefix" and the report.

    The returned steps keep their *recorded* outputs (what the agent will be shown); what the
    re-run printed is stored in `meta["restore"]` when it differs. Sampled steps become context
    (`tokens="context"`): their token ids are kept, their logprobs dropped. With `rerun=False`
    the session already holds the prefix's state (started from its snapshot): nothing runs.
    """
    report = RestoreReport()
    restored: list[Step] = []
    for step in prefix:
        check: dict[str, Any]
        if not rerun:
            check = {"exact": True, "normalized": True, "ran": False, "snapshot": True}
        elif step.command is None:
            check = {"exact": True, "normalized": True, "ran": False}
        else:
            res = session.run(step.command, timeout=timeout)
            report.sandbox_s += res.duration_s
            same_code = res.exit_code == step.exit_code
            exact = same_code and res.output == step.output
            norm = same_code and (exact or normalize_output(res.output, step.command)
                                  == normalize_output(step.output, step.command))
            check = {"exact": exact, "normalized": norm, "ran": True, "duration_s": round(res.duration_s, 6)}
            if not exact:
                check.update(exit_code=res.exit_code, output=res.output[:keep_output_chars],
                             kind="exit code" if not same_code else "output",
                             diff=short_diff(step.output, res.output))
            if norm and not exact:
                check["masks"] = sorted(masks_applied(res.output, step.command) | masks_applied(step.output, step.command))
        report.steps.append(check)
        meta = {k: v for k, v in step.meta.items() if k != "restore"}
        meta.setdefault("prefix_source", step.source)
        # restored replies are context, not samples: their ids stay, the old sampler's logprobs go
        tokens = {"tokens": "context", "logprobs": None} if step.tokens == "sampled" else {}
        restored.append(replace(step, source="prefix", meta={**meta, "restore": check}, **tokens))
    return restored, report

