"""The harness against real sandboxes (podman via the Docker API, bubblewrap) and the real SmolLM2."""

from pathlib import Path

import pytest
from agent_doubles import SUBMIT, bash, write_hello_task

from mirl.agent import AgentConfig, run_episode
from mirl.sandbox.base import SandboxConfig
from mirl.tasks import load_task

BUNDLED = Path(__file__).resolve().parents[2] / "tasks"


def _sandbox(request, backend):
    """The backend as users get it, once the shared fixture found it can run (else `missing()`)."""
    from mirl.sandbox.select import make_sandbox

    request.getfixturevalue(f"{backend}_sandbox")
    return make_sandbox(SandboxConfig(backend=backend))


def _no_sandbox_error(t) -> None:
    """An episode the sandbox ended (exit_reason "error" from a SandboxError) is a failure, never a skip."""
    assert not (t.exit_reason == "error" and "SandboxError" in (t.error or "")), f"the sandbox failed: {t.error}"


BACKENDS = [pytest.param("docker", marks=pytest.mark.podman), pytest.param("bwrap", marks=pytest.mark.bwrap)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_scripted_episode_and_prefix_restore(request, tmp_path, backend):
    from mirl.llm.scripted import ScriptedModel

    sandbox = _sandbox(request, backend)
    task = load_task(write_hello_task(tmp_path))
    replies = [bash("pwd && ls -a"), bash("echo hi > /app/hello.txt && cat /app/hello.txt"), SUBMIT]
    t = run_episode(task, sandbox, ScriptedModel(replies), seed=0)
    _no_sandbox_error(t)
    assert t.exit_reason == "submitted", t.error
    assert t.reward == 1.0 and t.verifier_error is None
    assert t.steps[0].output.startswith("/app\n") and t.steps[1].output == "hi\n"
    assert t.timings["sandbox_s"] > 0 and t.timings["verify_s"] > 0

    # the first two steps, restored in a fresh session, reproduce exactly; the agent continues from there
    cont = run_episode(task, sandbox, ScriptedModel([SUBMIT]), prefix=t.steps[:2])
    assert cont.meta["restore"]["exact"] and cont.prefix_len == 2
    assert cont.exit_reason == "submitted" and cont.reward == 1.0


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    from mirl.llm.client import LLMClient
    from mirl.llm.config import LLMConfig

    client = LLMClient(LLMConfig(), run_dir=tmp_path_factory.mktemp("llm"), stage="test")
    model = client.model("policy")
    model.complete([{"role": "user", "content": "hi"}], max_tokens=1)  # load it before any episode clock starts
    return model


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", BACKENDS)
def test_smollm2_plays_three_steps(request, tmp_path, backend, smollm2):
    sandbox = _sandbox(request, backend)
    task = load_task(BUNDLED / "count-lines")  # a bundled task, as users run them
    cfg = AgentConfig(max_steps=3, max_output_tokens=48, agent_timeout_s=600)  # a busy CPU is slow
    t = run_episode(task, sandbox, smollm2, cfg, seed=1)
    _no_sandbox_error(t)
    assert t.exit_reason in ("step_limit", "submitted"), t.error
    assert 1 <= len(t.steps) <= 3 and t.models["policy"] == "local/smollm2"
    assert all(s.output_tokens > 0 and s.input_tokens > 0 for s in t.steps)
    assert all(s.output for s in t.steps)  # a command's output or the format error the agent was shown
    assert t.reward is not None and t.timings["model_s"] > 0
