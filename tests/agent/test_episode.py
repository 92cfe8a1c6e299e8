import pytest
from agent_doubles import SUBMIT, FakeSandbox, FakeSession, Scripted, bash, tool_call

from mirl.agent import AgentConfig, Discard, run_episode
from mirl.agent.messages import build_messages
from mirl.records import Step
from mirl.sandbox.base import CommandResult


def test_submit_ends_episode_and_verifies(task):
    sb = FakeSandbox(reward=1.0)
    model = Scripted([bash("echo hi > /app/hello.txt"), SUBMIT])
    t = run_episode(task, sb, model, seed=3)
    assert t.exit_reason == "submitted" and t.reward == 1.0 and t.verifier_tail == "1 passed"
    assert [s.command for s in t.steps] == ["echo hi > /app/hello.txt", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert t.steps[0].output == "hi > /app/hello.txt\n" and t.steps[0].exit_code == 0
    assert sb.sessions[0].closed and sb.sessions[0].verified
    assert t.models == {"policy": "scripted"} and t.seed == 3
    assert model.calls[0][1]["seed"] == 3
    for key in ("model_s", "sandbox_s", "verify_s", "total_s", "own_s"):
        assert key in t.timings
    assert [s.output_tokens for s in t.steps] == [len(bash("echo hi > /app/hello.txt")) // 4, len(SUBMIT) // 4]


def test_each_step_samples_with_its_own_seed_and_a_rerun_with_the_same(task):
    """One seed for every step gives every step the same random draws: a policy shown a nearly
    unchanged prompt (a format error) repeats itself. Step 0 keeps the episode's seed."""
    def seeds(seed):
        model = Scripted(["no block", "no block", bash("ls"), SUBMIT])
        run_episode(task, FakeSandbox(), model, AgentConfig(max_steps=4), seed=seed)
        return [kw["seed"] for _, kw in model.calls]

    first = seeds(3)
    assert first[0] == 3 and len(set(first)) == 4 and all(0 <= s < 2**31 for s in first)
    assert seeds(3) == first and set(seeds(4)[1:]).isdisjoint(first)
    model = Scripted([bash("ls"), SUBMIT])
    run_episode(task, FakeSandbox(), model, AgentConfig(max_steps=4, pass_seed=False), seed=3)
    assert all("seed" not in kw for _, kw in model.calls)


@pytest.mark.parametrize("error", ["llm", "engine"])
def test_a_full_context_window_ends_the_episode_at_the_token_limit_and_verifies_it(task, error):
    """A failing episode that grew past the model's window scores its tests (0 here), as at
    max_context_tokens: as an error it would drop out of its RL group as an infrastructure fault."""
    from mirl.engines.generator import ContextLengthError
    from mirl.llm.errors import LLMError

    class Overflow(Scripted):
        def complete(self, messages, n=1, **kw):
            if len(self.calls) == 2:
                raise (LLMError("context_length", "prompt of 8100 tokens + max_tokens 1024 exceeds 8192")
                       if error == "llm" else ContextLengthError(8100, 1024, 8192))
            return super().complete(messages, n, **kw)

    t = run_episode(task, FakeSandbox(reward=0.0), Overflow([bash("ls"), bash("pwd"), SUBMIT]), AgentConfig(max_steps=9))
    assert t.exit_reason == "token_limit" and t.reward == 0.0 and len(t.steps) == 2
    assert "8192" in t.meta["context_error"] and t.error is None
    # a window that cannot hold even the first reply is a setting to fix: an error, as before
    class Never(Scripted):
        def complete(self, messages, n=1, **kw):
            raise LLMError("context_length", "prompt of 900 tokens + max_tokens 4096 exceeds 2048")

    t = run_episode(task, FakeSandbox(reward=0.0), Never([]), AgentConfig(max_steps=9))
    assert t.exit_reason == "error" and t.reward is None and "2048" in t.error
    # any other failure of the model still ends the episode as an error, unverified
    class Down(Scripted):
        def complete(self, messages, n=1, **kw):
            raise LLMError("server", "503")

    t = run_episode(task, FakeSandbox(reward=1.0), Down([]), AgentConfig(max_steps=9))
    assert t.exit_reason == "error" and t.reward is None


def test_model_sees_previous_observation(task):
    model = Scripted([bash("cat f"), SUBMIT])
    run_episode(task, FakeSandbox(respond=lambda c: CommandResult("content-of-f\n", 3, 0.0)), model)
    second_prompt = model.calls[1][0]
    assert second_prompt[-1]["role"] == "user"
    assert "<returncode>3</returncode>" in second_prompt[-1]["content"]
    assert "content-of-f" in second_prompt[-1]["content"]
    assert second_prompt[-2] == {"role": "assistant", "content": bash("cat f")}


def test_format_errors_are_steps_and_are_reported(task):
    model = Scripted(["no block here", bash("ls") + bash("pwd"), SUBMIT])
    sb = FakeSandbox()
    t = run_episode(task, sb, model)
    assert t.exit_reason == "submitted"
    assert [s.command for s in t.steps[:2]] == [None, None]
    assert "found 0 bash blocks" in t.steps[0].output and "found 2 bash blocks" in t.steps[1].output
    assert t.steps[0].raw == "no block here"
    assert [c for c, _ in sb.sessions[0].ran] == ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert "found 0 bash blocks" in model.calls[1][0][-1]["content"]


def test_step_limit(task):
    t = run_episode(task, FakeSandbox(), Scripted([bash("ls")]), AgentConfig(max_steps=5))
    assert t.exit_reason == "step_limit" and len(t.steps) == 5 and t.reward == 1.0


def test_agent_timeout_caps_command_timeout(task):
    sb = FakeSandbox(delay_s=0.05)
    t = run_episode(task, sb, Scripted([bash("sleep 1")]), AgentConfig(agent_timeout_s=0.2, command_timeout_s=30))
    assert t.exit_reason == "agent_timeout"
    assert 1 <= len(t.steps) < 10
    assert all(timeout <= 30 for _, timeout in sb.sessions[0].ran)
    assert sb.sessions[0].ran[0][1] <= 1.0  # the command got at most what was left of the agent's time


def test_task_agent_timeout_is_the_default(tmp_path):
    from agent_doubles import make_task

    t = run_episode(make_task(tmp_path, agent_timeout_s=0.1), FakeSandbox(delay_s=0.03), Scripted([bash("ls")]))
    assert t.exit_reason == "agent_timeout"


def _prompt_chars(task, steps):
    return sum(len(m["content"]) for m in build_messages(task.instruction, steps))


def test_token_limit(task):
    def big(c):  # ~1000 tokens per observation at the default 4 characters a token
        return CommandResult("x" * 4000 + "\n", 0, 0.0)

    t = run_episode(task, FakeSandbox(respond=big), Scripted([bash("cat big")]), AgentConfig(max_context_tokens=3000))
    assert t.exit_reason == "token_limit"
    # it stops before the first prompt that reaches 3000 * 4 characters, and not earlier
    assert _prompt_chars(task, t.steps) >= 12000 > _prompt_chars(task, t.steps[:-1])
    assert t.meta["context_tokens_estimate"] == _prompt_chars(task, t.steps) // 4


def test_token_limit_uses_reported_prompt_tokens(task):
    # a model whose tokenizer counts 1 token per character hits the limit long before chars/4 would
    model = Scripted([bash("ls")], input_tokens=lambda msgs: sum(len(m["content"]) for m in msgs))
    t = run_episode(task, FakeSandbox(), model, AgentConfig(max_context_tokens=1500))
    assert t.exit_reason == "token_limit"
    # calibrated on the previous prompt, the estimate is exact: the first prompt of >= 1500 chars stops it
    assert _prompt_chars(task, t.steps) >= 1500 > _prompt_chars(task, t.steps[:-1])
    assert t.meta["context_tokens_estimate"] == _prompt_chars(task, t.steps)
    assert len(model.calls) == len(t.steps)


def test_response_limit_counts_from_the_first_prompt(task):
    """The paper's 65,536-token response cap: tokens after the first prompt (replies and tool outputs),
    not the whole context; with a context cap far away, the response cap ends the episode."""
    def big(c):  # ~1000 tokens per observation at the default 4 characters a token
        return CommandResult("x" * 4000 + "\n", 0, 0.0)

    config = AgentConfig(max_context_tokens=10**6, max_response_tokens=2500)
    t = run_episode(task, FakeSandbox(respond=big), Scripted([bash("cat big")]), config)
    assert t.exit_reason == "token_limit"
    first = _prompt_chars(task, [])
    assert _prompt_chars(task, t.steps) - first >= 2500 * 4 > _prompt_chars(task, t.steps[:-1]) - first
    assert t.meta["response_tokens_estimate"] == (_prompt_chars(task, t.steps) - first) // 4
    unlimited = run_episode(task, FakeSandbox(respond=big), Scripted([bash("cat big")]),
                            AgentConfig(max_context_tokens=10**6, max_steps=5))
    assert unlimited.exit_reason == "step_limit"


def test_model_error_is_recorded_not_raised(task):
    class Broken:
        name = "broken"

        def complete(self, messages, n=1, **kw):
            raise ConnectionError("server went away")

    sb = FakeSandbox()
    t = run_episode(task, sb, Broken())
    assert t.exit_reason == "error" and "server went away" in t.error and t.reward is None
    assert sb.sessions[0].closed and not sb.sessions[0].verified


def test_tool_mode_messages_and_parsing(task):
    model = Scripted([("Listing.", [tool_call("ls", "c1")]), ("", [tool_call("a", "x"), tool_call("b", "y")]),
                      ("done", [tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "c3")])])
    t = run_episode(task, FakeSandbox(), model, AgentConfig(action_format="tool"))
    assert t.exit_reason == "submitted"
    assert [s.command for s in t.steps] == ["ls", None, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert model.calls[0][1]["tools"][0]["function"]["name"] == "bash"
    third = model.calls[2][0]
    assert third[2]["tool_calls"][0]["id"] == "c1"
    assert third[3] == {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>\n<output>\nran: ls\n</output>"}
    # the rejected double call: both ids answered with the format error
    assert [m["tool_call_id"] for m in third[5:7]] == ["x", "y"]
    assert "found 2 tool calls" in third[5]["content"]


class Replace:
    models = {"teacher": "fixed-teacher"}

    def __init__(self):
        self.seen = []

    def review(self, ctx):
        self.seen.append((len(ctx.steps), ctx.proposed.command, ctx.messages[-1]["role"]))
        if ctx.proposed.command == "rm -rf /app":
            return Step(reasoning="Safer.", command="ls /app", source="teacher", input_tokens=7)
        return ctx.proposed


def test_hook_replaces_a_step(task):
    hook = Replace()
    sb = FakeSandbox()
    t = run_episode(task, sb, Scripted([bash("rm -rf /app"), SUBMIT]), hook=hook)
    assert [c for c, _ in sb.sessions[0].ran] == ["ls /app", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert t.steps[0].source == "teacher" and t.steps[0].meta["proposed"]["command"] == "rm -rf /app"
    assert t.steps[1].source == "policy"
    assert hook.seen[0] == (0, "rm -rf /app", "user") and hook.seen[1][0] == 1
    assert t.models["teacher"] == "fixed-teacher"


def test_hook_discards_the_episode(task):
    class Reject:
        def review(self, ctx):
            return Discard("teacher failed 3 times") if ctx.steps else ctx.proposed

    sb = FakeSandbox()
    t = run_episode(task, sb, Scripted([bash("ls"), bash("pwd")]), hook=Reject())
    assert t.exit_reason == "discarded" and t.meta["discard_reason"] == "teacher failed 3 times"
    assert len(t.steps) == 1 and t.meta["discarded_step"]["command"] == "pwd"
    assert t.reward is None and not sb.sessions[0].verified and sb.sessions[0].closed


def test_episode_from_a_prefix(task):
    recorded = [Step("look", "ls", output="ran: ls\n", exit_code=0),
                Step("oops", None, output="Format error ..."),
                Step("date", "date", output="Mon Jan  1 10:00:00 UTC 2024\n", exit_code=0),
                Step("count", "wc -l f", output="3 f\n", exit_code=0)]

    def respond(cmd):
        return {"ls": "ran: ls\n", "date": "Tue Feb  6 11:22:33 UTC 2025\n", "wc -l f": "4 f\n"}.get(cmd, cmd.removeprefix("echo ") + "\n")

    model = Scripted([SUBMIT])
    sb = FakeSandbox(respond=respond)
    t = run_episode(task, sb, model, prefix=recorded)
    assert [c for c, _ in sb.sessions[0].ran] == ["ls", "date", "wc -l f", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert t.prefix_len == 4 and [s.source for s in t.steps] == ["prefix"] * 4 + ["policy"]
    checks = [s.meta["restore"] for s in t.steps[:4]]
    assert [(c["exact"], c["normalized"]) for c in checks] == [(True, True), (True, True), (False, True), (False, False)]
    assert checks[3]["output"] == "4 f\n"
    assert t.meta["restore"]["first_mismatch"] == 3 and not t.meta["restore"]["normalized"]
    # the agent continues from the recorded outputs, not the re-run ones
    prompt = model.calls[0][0]
    assert "3 f" in prompt[-1]["content"] and "Mon Jan" in prompt[-3]["content"]
    assert t.exit_reason == "submitted"


def test_prefix_mismatch_can_discard(task):
    recorded = [Step("count", "wc -l f", output="3 f\n", exit_code=0)]
    t = run_episode(task, FakeSandbox(respond=lambda c: "4 f\n"), Scripted([SUBMIT]),
                    AgentConfig(on_restore_mismatch="discard"), prefix=recorded)
    assert t.exit_reason == "discarded" and "step 0" in t.meta["discard_reason"]


def test_running_in_a_given_session(task):
    s = FakeSession(task)
    t = run_episode(task, s, Scripted([SUBMIT]))
    assert t.exit_reason == "submitted" and s.closed


def test_submission_marker_must_be_first_line():
    from mirl.agent.episode import is_submission

    assert is_submission("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")
    assert is_submission("\n  COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nextra")
    assert not is_submission("done\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")
