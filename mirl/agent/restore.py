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

from mirl.agent.trajectory import Step
from mirl.sandbox.base import Session

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_VOLATILE = [
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<DATETIME>"),
    (re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b[^\n]{0,40}\b\d{1,2}:\d{2}(:\d{2})?\b[^\n]{0,12}\d{4}"), "<DATETIME>"),
    (re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+(\d{1,2}:\d{2}|\d{4})\b"), "<DATE>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<TIME>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b"), "<HASH>"),
    (re.compile(r"/tmp/[\w.-]+"), "/tmp/<TMP>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds|µs|us|ns|MB/s|kB/s|KB/s|GB/s|B/s)\b"), "<DURATION>"),
    (re.compile(r"\b(pid|PID|process)\s*[=:]?\s*\d+\b"), r"\1 <PID>"),
]


def normalize_output(text: str) -> str:
    """Output with volatile parts (times, ids, temp names, durations, spacing) masked."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


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
                   keep_output_chars: int = 2000) -> tuple[list[Step], RestoreReport]:
    """Re-run each prefix command; return the prefix as steps with source="prefix" and the report.

    The returned steps keep their *recorded* outputs (what the agent will be shown); what the
    re-run printed is stored in `meta["restore"]` when it differs. Sampled steps become context
    (`tokens="context"`): their token ids are kept, their logprobs dropped.
    """
    report = RestoreReport()
    restored: list[Step] = []
    for step in prefix:
        check: dict[str, Any]
        if step.command is None:
            check = {"exact": True, "normalized": True, "ran": False}
        else:
            res = session.run(step.command, timeout=timeout)
            report.sandbox_s += res.duration_s
            same_code = res.exit_code == step.exit_code
            exact = same_code and res.output == step.output
            norm = same_code and (exact or normalize_output(res.output) == normalize_output(step.output))
            check = {"exact": exact, "normalized": norm, "ran": True}
            if not exact:
                check.update(exit_code=res.exit_code, output=res.output[:keep_output_chars])
        report.steps.append(check)
        meta = {k: v for k, v in step.meta.items() if k != "restore"}
        meta.setdefault("prefix_source", step.source)
        # restored replies are context, not samples: their ids stay, the old sampler's logprobs go
        tokens = {"tokens": "context", "logprobs": None} if step.tokens == "sampled" else {}
        restored.append(replace(step, source="prefix", meta={**meta, "restore": check}, **tokens))
    return restored, report

