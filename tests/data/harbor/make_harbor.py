"""Write the Harbor job directory of this folder with Harbor's own code (see SOURCE.md).

Harbor's `convert_mini_swe_agent_to_atif` (the converter its mini-swe-agent agent runs after every
trial) turns real mini-swe-agent SWE-bench trajectories into ATIF `agent/trajectory.json`; Harbor's
`TrialResult` model writes each trial's `result.json`, with the reward SWE-bench's evaluation gave
(report.json `resolved`). Needs Python >= 3.12:

    python3.12 -m venv /tmp/hv && /tmp/hv/bin/pip install harbor==0.26.0
    /tmp/hv/bin/python tests/data/harbor/make_harbor.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from uuid import UUID

from harbor.agents.installed.mini_swe_agent import convert_mini_swe_agent_to_atif
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, LocalTaskId, ModelInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

HERE = Path(__file__).parent
TRAJS = HERE.parent / "trajectories" / "swebench_mini1"
JOB = HERE / "jobs" / "2025-11-18__mini-swe-agent__gemini-3-pro"
RESOLVED = {"django__django-16255": True, "matplotlib__matplotlib-24870": True, "django__django-13401": True}
NESTED = "django__django-13401"  # written as attempts/001 + attempts/002, trial_uri naming the last


def _result(instance: str, trial: str, uri: str, n: int) -> TrialResult:
    doc = json.loads((TRAJS / f"{instance}.traj.json").read_text())
    model = doc["info"]["config"]["model"]["model_name"]
    config = TrialConfig(task=TaskConfig(path=Path(f"swebench-verified/{instance}")), trial_name=trial,
                         trials_dir=Path("jobs") / JOB.name,
                         agent=AgentConfig(name="mini-swe-agent", model_name=model),
                         job_id=UUID(int=1))
    return TrialResult(
        id=UUID(int=100 + n), task_name=instance, trial_name=trial, trial_uri=uri,
        task_id=LocalTaskId(path=Path(f"swebench-verified/{instance}")), task_checksum=f"{n:064x}",
        config=config, agent_info=AgentInfo(name="mini-swe-agent", version=doc["info"]["mini_version"],
                                            model_info=ModelInfo(name=model.split("/", 1)[1],
                                                                 provider=model.split("/", 1)[0])),
        verifier_result=VerifierResult(rewards={"reward": 1.0 if RESOLVED[instance] else 0.0}),
    )


def main() -> None:
    shutil.rmtree(JOB, ignore_errors=True)
    for n, instance in enumerate(RESOLVED):
        trial = f"{instance}__{n:07x}"
        trial_dir = JOB / trial
        agent_dirs = [trial_dir / "agent"]
        uri = f"file:///jobs/{JOB.name}/{trial}"
        if instance == NESTED:
            agent_dirs = [trial_dir / "attempts" / "001" / "agent", trial_dir / "attempts" / "002" / "agent"]
            uri += "/attempts/002"
        doc = json.loads((TRAJS / f"{instance}.traj.json").read_text())
        for k, agent_dir in enumerate(agent_dirs):
            agent_dir.mkdir(parents=True)
            if k < len(agent_dirs) - 1:  # an earlier attempt: a run that stopped after its first reply
                doc_k = {**doc, "messages": doc["messages"][:4]}
                (agent_dir / "mini-swe-agent.trajectory.json").write_text(json.dumps(doc_k, indent=2))
                continue
            atif = convert_mini_swe_agent_to_atif(doc, session_id=str(UUID(int=200 + n)))
            (agent_dir / "trajectory.json").write_text(json.dumps(atif.to_json_dict(), indent=2))
        (trial_dir / "result.json").write_text(_result(instance, trial, uri, n).model_dump_json(indent=4))
    (JOB / "result.json").write_text(json.dumps({"id": str(UUID(int=1)), "n_total_trials": len(RESOLVED)}, indent=4))


if __name__ == "__main__":
    main()
