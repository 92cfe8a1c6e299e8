"""Write the mini-swe-agent fixtures of this folder by running mini-swe-agent itself (see SOURCE.md).

Its real `DefaultAgent`, its real model classes (reply parsing, format errors, observation
templates from its own config files) and its real `LocalEnvironment` run bash in a temporary
folder; only the model's replies are scripted: litellm's `mock_response` / `mock_tool_calls` stand
in for the network call (2.x), its own test `DeterministicModel` for the whole model (1.x).

    pip install mini-swe-agent==2.4.6 && python tests/data/trajectories/make_miniswe.py
    pip install --no-deps --target /tmp/mswe1 mini-swe-agent==1.17.5
    PYTHONPATH=/tmp/mswe1 python tests/data/trajectories/make_miniswe.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled price list
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

import minisweagent  # noqa: E402
import yaml  # noqa: E402

HERE = Path(__file__).parent
TASK = "Count the lines of data.txt into count.txt."
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat count.txt"  # the submission: what follows the marker


def _workdir() -> str:
    d = tempfile.mkdtemp(prefix="mswe-fixture-")
    Path(d, "data.txt").write_text("alpha\nbeta\ngamma\n")
    Path(d, "records.bin").write_bytes(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xff\xfe\x00\x00binary\x00")
    return d


def _block(thought: str, command: str, fence: str = "mswea_bash_command") -> str:
    return f"THOUGHT: {thought}\n\n```{fence}\n{command}\n```"


def _call(cid: str, command: str, name: str = "bash") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps({"command": command})}}


TEXT_REPLIES = [
    _block("Look at the files first.", "ls"),
    _block("Count the lines.", "wc -l < data.txt"),
    "I think the count is three.",  # no block: a format error
    "Both at once.\n\n```mswea_bash_command\ncat data.txt\n```\n\n```mswea_bash_command\nwc -c data.txt\n```",
    _block("Is there a header file?", "cat header.txt"),  # fails
    _block("Wait for the slow part.", "sleep 5"),  # runs past the environment's timeout
    _block("Write the count.", "wc -l < data.txt > count.txt && cat count.txt"),
    _block("Done.", SUBMIT),
]

TOOL_REPLIES = [
    ("Look at the files first.", [_call("call_ls", "ls")]),
    ("Now I will count the lines.", []),  # no tool call: a format error
    ("Read both files.", [_call("call_cat_data", "cat data.txt"), _call("call_cat_header", "cat header.txt")]),
    ("Use python instead.", [_call("call_py", "print(3)", name="python")]),  # unknown tool: a format error
    ("Write the count.", [_call("call_wc", "wc -l < data.txt > count.txt && cat count.txt")]),
    ("", [_call("call_submit", SUBMIT)]),
]

LIMIT_REPLIES = [_block("Look around.", "ls"), _block("Look again.", "ls -a"), _block("Never sent.", "pwd")]


def _scripted(base):
    """mini-swe-agent's litellm model class with litellm's own mock standing in for the API call."""

    class Scripted(base):
        def __init__(self, replies, **kwargs):
            super().__init__(**kwargs)
            self.replies = list(replies)

        def _query(self, messages, **kwargs):
            reply = self.replies.pop(0)
            if isinstance(reply, tuple):
                content, calls = reply
                kwargs |= {"mock_response": content, **({"mock_tool_calls": calls} if calls else {})}
            else:
                kwargs["mock_response"] = reply
            return super()._query(messages, **kwargs)

    return Scripted


def _run_v2(name: str, config_file: str, model_base, replies, **agent_kwargs) -> None:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment

    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / config_file).read_text())
    model_config = {k: v for k, v in config["model"].items() if k != "model_kwargs"}
    model = _scripted(model_base)(replies, model_name="openai/scripted", cost_tracking="ignore_errors", **model_config)
    env = LocalEnvironment(cwd=_workdir(), timeout=1, env=config["environment"]["env"])
    agent_config = {k: v for k, v in config["agent"].items() if k != "mode"} | agent_kwargs
    agent = DefaultAgent(model, env, output_path=HERE / name, **agent_config)
    agent.run(TASK)


def main() -> None:
    version = minisweagent.__version__
    if version.startswith("1."):
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import builtin_config_dir
        from minisweagent.environments.local import LocalEnvironment
        from minisweagent.models.test_models import DeterministicModel
        from minisweagent.run.utils.save import save_traj

        config = yaml.safe_load((builtin_config_dir / "default.yaml").read_text())
        replies = [r.replace("mswea_bash_command", "bash") for r in TEXT_REPLIES]
        agent = DefaultAgent(DeterministicModel(outputs=replies), LocalEnvironment(cwd=_workdir(), timeout=1),
                             **config["agent"])
        status, result = agent.run(TASK)
        save_traj(agent, HERE / "mswea1_text.traj.json", exit_status=status, result=result)
        return
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    _run_v2("mswea2_text.traj.json", "mini_textbased.yaml", LitellmTextbasedModel, TEXT_REPLIES)
    _run_v2("mswea2_toolcall.traj.json", "mini.yaml", LitellmModel, TOOL_REPLIES)
    _run_v2("mswea2_step_limit.traj.json", "mini_textbased.yaml", LitellmTextbasedModel, LIMIT_REPLIES, step_limit=2)


if __name__ == "__main__":
    sys.exit(main())
