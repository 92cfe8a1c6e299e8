"""python benchmarks/embedded_batch.py [--episodes 8] [--steps 4] [--max-tokens 64] [--path text|tokens] [--concurrent-only]

Continuous batching in the embedded model: agent steps per second with episodes played one after
another vs all at once (one thread each, as the profiling stage's workers do).

Each episode is a growing conversation like benchmarks/embedded.py's (system prompt, a task made
distinct per episode, then a scripted reply and an observation per step), so both modes see the
same prompts; the policy samples at temperature 1 with a per-episode seed. Prints the wall time of
each mode, the ratio, where the decode thread spent its time, the largest batch, and how many
replies came out the same both ways (they may differ by float rounding between batch shapes).

`--path tokens` plays the same episodes on the token path (`generate_tokens` on ids appended
turn by turn, as the agent harness does: the scripted reply tokenized as context, then the
observation with the template glue); the prompts are the same ids as the text path's, so the two
paths' numbers compare directly. `--concurrent-only` skips the one-at-a-time pass.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.embedded import REPLIES, SYSTEM, TASK, observation  # noqa: E402
from mirl.engines import registry  # noqa: E402


def play(lm, episode: int, steps: int, max_tokens: int, path: str = "text") -> list[str]:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Episode {episode}. " + TASK}]
    if path == "tokens":
        from mirl.agent.tokens import ChatGlue

        glue = ChatGlue.of(lm.tokenizer, lm.end_ids)
        ids = glue.prompt_ids(messages)
    texts = []
    for s in range(steps):
        if path == "tokens":
            g = lm.generate_tokens(ids, [0], max_tokens=max_tokens, temperature=1.0, seed=1000 * episode + s)
            texts.append(glue.text(g.samples[0].ids))
        else:
            g = lm.generate(messages, [0], max_tokens=max_tokens, temperature=1.0, seed=1000 * episode + s)
            texts.append(g.samples[0].text)
        thought, cmd = REPLIES[(s + episode) % len(REPLIES)]
        reply, obs = f"{thought}\n```bash\n{cmd}\n```", {"role": "user", "content": observation(s + episode)}
        messages = messages + [{"role": "assistant", "content": reply}, obs]
        if path == "tokens":
            comp = glue.context_ids(reply)
            ids = ids + comp + glue.observation_ids(comp, [obs])
    return texts


def main() -> int:
    ap = argparse.ArgumentParser(description="Agent steps per second, episodes one at a time vs concurrent.")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--path", choices=("text", "tokens"), default="text", help="the text path or the token path")
    ap.add_argument("--concurrent-only", action="store_true", help="skip the one-at-a-time pass")
    args = ap.parse_args()
    lm = registry.get("smollm2")
    calls = args.episodes * args.steps

    def timed(concurrent: bool):
        lm.clear_prefix_cache()
        before = dict(lm._batcher.stats)
        out: dict[int, list[str]] = {}
        t0 = time.perf_counter()
        if concurrent:
            threads = [threading.Thread(target=lambda e=e: out.__setitem__(
                e, play(lm, e, args.steps, args.max_tokens, args.path))) for e in range(args.episodes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for e in range(args.episodes):
                out[e] = play(lm, e, args.steps, args.max_tokens, args.path)
        wall = time.perf_counter() - t0
        spent = {k: lm._batcher.stats[k] - before[k] for k in before}
        return wall, out, spent

    lm._batcher.max_rows_seen = 0
    runs = [] if args.concurrent_only else [("one at a time", *timed(False))]
    runs.append(("concurrent", *timed(True)))
    print(f"{args.episodes} episodes x {args.steps} steps, <= {args.max_tokens} tokens per reply, "
          f"SmolLM2-135M on the CPU, {args.path} path")
    print("| mode | wall s | s/step | prefill s | prefill tokens | decode s | sample s | regroup s | forward passes | row-steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, wall, _, spent in runs:
        print(f"| {name} | {wall:.1f} | {wall / calls:.2f} | {spent['prefill_s']:.1f} | {spent['prefill_tokens']} | {spent['decode_s']:.1f} | "
              f"{spent['sample_s']:.1f} | {spent['regroup_s']:.1f} | {spent['decode_steps']} | {spent['row_steps']} |")
    if len(runs) == 2:
        (_, serial, serial_out, _), (_, together, together_out, _) = runs
        same = sum(a == b for e in serial_out for a, b in zip(serial_out[e], together_out[e]))
        print(f"\nspeed-up (one at a time / concurrent): {serial / together:.2f}x; largest batch "
              f"{lm._batcher.max_rows_seen} rows; same reply both ways: {same}/{calls}")
    else:
        print(f"\nlargest batch {lm._batcher.max_rows_seen} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
