"""What one seed for every step of an episode did to the embedded policy's episodes.

    python benchmarks/step_seeds.py --episodes 16 --task tasks/count-lines --sandbox bwrap

Plays the same SmolLM2 episodes twice, side by side: once with every step sampled under the
episode's seed (the kit before `mirl.agent.episode.step_seed`: each step drew the same random
numbers), once with each step's own seed. Prints, per scheme, the share of steps that repeat the
previous step's reply word for word, the share of steps that ran no command, and the share of
episodes that ran none at all. A repeat the sampler made looks like a looping policy, and after
"no runnable command" it is silence: both are misbehaviors the kit measures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from unittest import mock

from mirl.agent import AgentConfig, run_episode
from mirl.agent import episode as episode_module
from mirl.llm.client import LLMClient
from mirl.params import make
from mirl.sandbox import make_sandbox
from mirl.tasks import load_task


def play(task, sandbox, model, config, seeds) -> dict[str, float]:
    steps = repeats = silent_steps = silent_episodes = 0
    for seed in seeds:
        t = run_episode(task, sandbox, model, config, seed=seed)
        replies = [s.raw for s in t.steps]
        steps += len(replies)
        repeats += sum(a == b for a, b in zip(replies, replies[1:]))
        silent_steps += sum(s.command is None for s in t.steps)
        silent_episodes += all(s.command is None for s in t.steps)
    later = steps - len(seeds)  # steps that have a previous step
    return {"episodes": len(seeds), "steps": steps,
            "repeat_share": round(repeats / max(later, 1), 3),
            "no_command_step_share": round(silent_steps / max(steps, 1), 3),
            "no_command_episode_share": round(silent_episodes / max(len(seeds), 1), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--task", default="tasks/count-lines", help="a Harbor task directory")
    ap.add_argument("--sandbox", default="bwrap", help="a sandbox backend (bwrap, local, docker, ...)")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args()

    p = make(models={"policy": {"model": "local/smollm2", "max_tokens": args.max_tokens,
                                "temperature": args.temperature}},
             sandbox={"backend": args.sandbox})
    model = LLMClient(p.models, run_dir=tempfile.mkdtemp(prefix="step-seeds-"), stage="benchmark").model("policy")
    sandbox = make_sandbox(p.sandbox)
    task = load_task(Path(args.task))
    config = AgentConfig(max_steps=args.max_steps, command_timeout_s=20)
    seeds = list(range(args.episodes))
    with mock.patch.object(episode_module, "step_seed", lambda seed, step: seed):
        one = play(task, sandbox, model, config, seeds)
    own = play(task, sandbox, model, config, seeds)
    print(json.dumps({"task": task.id, "one_seed_per_episode": one, "one_seed_per_step": own}, indent=1))


if __name__ == "__main__":
    main()
