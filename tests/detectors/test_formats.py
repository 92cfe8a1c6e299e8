"""The readers of other tools' formats: ATIF files, Harbor job directories, Terminal-Bench 1 trials."""

import json
import shutil
from pathlib import Path

import pytest

from mirl.agent.miniswe import load_traj_json
from mirl.cli import main
from mirl.records.trajectory import Step
from mirl.sources import TrajectoryFileError, find_sources, read_source

DATA = Path(__file__).parent.parent / "data"
JOB = DATA / "harbor" / "jobs" / "2025-11-18__mini-swe-agent__gemini-3-pro"
TERMINUS = DATA / "atif" / "handwritten_terminus_restart.trajectory.json"


def _atif_steps(path):
    return [s for s in json.loads(Path(path).read_text())["steps"] if s["source"] == "agent"]


def test_terminus_atif_keystrokes_batches_parse_errors_and_task_complete():
    [t] = read_source(TERMINUS)
    assert [s.command for s in t.steps] == [
        "ls /app/site", "cat /app/site/logo.png", None, "pkill -f python",
        "cd /app/site && nohup python3 -m http.server 8000 > /tmp/http.log 2>&1 &", "",
        "curl -s localhost:8000 | head -n 3", "sed -i 's/<title>site/<title>Site/' index.html", "tool:mark_task_complete"]
    raw = _atif_steps(TERMINUS)
    assert t.steps[1].output == raw[0]["observation"]["results"][0]["content"]  # the batch's screen: its last command
    assert t.steps[0].output == "" and t.steps[0].meta["reply_actions"] == 2
    assert t.steps[2].output.startswith("Previous response had parsing errors")
    assert t.steps[5].meta["wait"] and t.steps[8].meta["submission"] and t.exit_reason == "submitted"
    assert t.steps[0].completion_ids == [791, 3290, 11] and t.steps[0].logprobs[1] == -0.4
    assert t.steps[0].tokens == "sampled"  # ATIF token ids land in the step's own fields
    assert (t.steps[0].input_tokens, t.steps[0].output_tokens) == (812, 64)
    assert t.meta["final_message"].startswith("The server is restarted")  # not a step
    assert t.instruction.startswith("Restart the web server") and t.models == {"policy": "openai/gpt-4.1-mini"}


def test_harbor_converted_mini_swe_agent_reads_as_the_original():
    trial = JOB / "django__django-16255__0000000"
    [t] = read_source(trial)
    original = load_traj_json(DATA / "trajectories" / "swebench_mini1" / "django__django-16255.traj.json")
    assert [(s.command, s.exit_code, s.output) for s in t.steps] == \
        [(s.command, s.exit_code, s.output) for s in original.steps]
    assert (t.task, t.reward, t.models) == ("django__django-16255", 1.0, {"policy": "google/gemini-3-pro-preview"})


def test_a_jobs_directory_is_searched_for_trials_and_nested_attempts_follow_trial_uri():
    sources = find_sources([DATA / "harbor"])
    assert sorted(p.name for p in sources) == ["django__django-13401__0000002", "django__django-16255__0000000",
                                               "matplotlib__matplotlib-24870__0000001"]
    [nested] = read_source(JOB / "django__django-13401__0000002")
    assert nested.meta["source_file"].endswith("attempts/002/agent/trajectory.json")
    assert len(nested.steps) == 27  # the final attempt, not the first one cut after a reply


def test_harbor_rewards_are_averaged_per_key_and_reward_files_are_read(tmp_path):
    trial = tmp_path / "jobs" / "j" / "t1"
    shutil.copytree(JOB / "django__django-16255__0000000", trial)
    result = json.loads((trial / "result.json").read_text())
    result["verifier_result"] = {"rewards": {"a": 1, "b": 0}}
    (trial / "result.json").write_text(json.dumps(result))
    assert read_source(trial)[0].reward == 0.5
    result["verifier_result"] = None
    (trial / "result.json").write_text(json.dumps(result))
    (trial / "verifier").mkdir()
    (trial / "verifier" / "reward.txt").write_text("0.25\n")
    assert read_source(trial)[0].reward == 0.25
    shutil.rmtree(trial / "agent")
    with pytest.raises(TrajectoryFileError, match="t1: Harbor trial with no agent trajectory"):
        read_source(trial)


def test_detect_on_a_harbor_jobs_directory(capsys):
    assert main(["detect", str(DATA / "harbor"), "--json"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((f["task"], f["step"], f["detector"]) for f in found) == [
        ("django__django-13401", 7, "retry-unchanged-after-failure"),
        ("matplotlib__matplotlib-24870", 18, "recheck-unchanged-after-success")]


def test_tb1_trial_with_terminus_episodes(tmp_path):
    trial = tmp_path / "runs" / "r1" / "hello" / "hello.1-of-1.r1"
    for k, (reply, prompt) in enumerate([
            ({"state_analysis": "empty", "explanation": "look", "commands": [{"keystrokes": "ls\n"}],
              "is_task_complete": False}, "Task: write hello.txt"),
            ({"state_analysis": "", "explanation": "write", "commands": [{"keystrokes": "echo hi > hello.txt\n"}],
              "is_task_complete": True}, "root@x:/app# ls\nREADME\n")]):
        ep = trial / "agent-logs" / f"episode-{k}"
        ep.mkdir(parents=True)
        (ep / "response.json").write_text(json.dumps(reply))
        (ep / "prompt.txt").write_text(prompt)
    (trial / "results.json").write_text(json.dumps({"task_id": "hello", "trial_name": trial.name, "is_resolved": False}))
    assert find_sources([tmp_path]) == [trial]
    [t] = read_source(trial)
    assert [s.command for s in t.steps] == ["ls", "echo hi > hello.txt", "tool:task_complete"]
    assert t.steps[0].output == "root@x:/app# ls\nREADME\n" and (t.task, t.reward) == ("hello", 0.0)
    shutil.rmtree(trial / "agent-logs")
    with pytest.raises(TrajectoryFileError, match="Terminal-Bench 1 trial with no readable agent log"):
        read_source(trial)


def test_an_unknown_file_gets_one_line_naming_it_and_the_formats_tried(tmp_path, capsys):
    bad = tmp_path / "run.traj.json"
    bad.write_text(json.dumps({"events": [1, 2]}))
    assert main(["detect", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (f"mirl detect: {bad}: not a trajectory format this kit reads (tried our JSONL, mini-swe-agent "
                      ".traj.json, chat message list, ATIF v1.0-v1.8, Harbor trial directory, Terminal-Bench 1 trial "
                      "directory)")
    assert "TypeError" not in "\n".join(err)


def test_an_editor_tools_subcommand_is_not_read_as_a_shell_command():
    # OpenHands (as Harbor writes it) calls str_replace_editor with {"command": "create", "path": ...}
    [t] = read_source(DATA / "atif" / "harbor_golden_openhands_hello_world.trajectory.json")
    edit, finish = t.steps
    assert edit.command.startswith("tool:str_replace_editor ")
    assert json.loads(edit.command.partition(" ")[2])["path"] == "/app/hello.txt"
    assert edit.output == "File created successfully at: /app/hello.txt"
    assert finish.command == "tool:finish" and finish.meta["submission"] and t.exit_reason == "submitted"
    assert t.instruction == 'Create a file called hello.txt with "Hello, world!" as the content.\n'


LINEAR = DATA / "atif" / "harbor_golden_terminus2_linear_history"


def test_terminus_replies_kept_raw_are_read_as_their_keystrokes(tmp_path):
    # Terminus-2's raw_content option keeps the model's JSON reply as the message, with no tool calls
    [t] = read_source(LINEAR / "trajectory.cont-1.json")
    assert [s.command for s in t.steps] == ["printf 'Hello, world!\\n' > hello.txt", "cat hello.txt",
                                            "tool:mark_task_complete", "tool:mark_task_complete"]
    assert t.steps[1].output.endswith("# cat hello.txt\nHello, world!\n\n\n") and t.exit_reason == "submitted"
    assert t.steps[0].reasoning.startswith("Analysis: Based on the handoff") and t.steps[0].raw.startswith("{")
    # the XML response format (a file that does not name its parser), and a reply refused as unparsable
    doc = json.loads((LINEAR / "trajectory.json").read_text())
    del doc["agent"]["extra"]["parser"], doc["continued_trajectory_ref"]
    doc["steps"][1]["message"] = ("<response><analysis>empty</analysis><plan>look</plan><commands>"
                                  "<keystrokes duration=\"0.1\">ls -la\n</keystrokes></commands></response>")
    doc["steps"][2]["observation"]["results"][0]["content"] = "Previous response had parsing errors:\nERROR: x"
    (tmp_path / "trajectory.json").write_text(json.dumps(doc))
    [x] = read_source(tmp_path / "trajectory.json")
    assert [s.command for s in x.steps] == ["ls -la", None, "echo 'test2' > test_dir/file2.txt"]
    assert x.steps[0].reasoning == "Analysis: empty\nPlan: look"


def test_a_linear_history_episode_goes_on_in_the_continuation_files(tmp_path, capsys):
    # Terminus-2's linear_history ends trajectory.json at a summarization; continued_trajectory_ref names the rest
    [t] = read_source(LINEAR / "trajectory.json")
    assert [s.command for s in t.steps] == [
        "mkdir test_dir", "echo 'test1' > test_dir/file1.txt", "echo 'test2' > test_dir/file2.txt",
        "printf 'Hello, world!\\n' > hello.txt", "cat hello.txt", "tool:mark_task_complete", "tool:mark_task_complete"]
    assert t.exit_reason == "submitted" and t.meta["continuations"] == ["trajectory.cont-1.json"]
    # a Harbor trial holding them reads the same episode; a directory search finds it once
    trial = tmp_path / "jobs" / "j" / "hello-world__abc"
    shutil.copytree(LINEAR, trial / "agent")
    shutil.copy(JOB / "django__django-16255__0000000" / "result.json", trial / "result.json")
    assert find_sources([tmp_path]) == [trial]
    assert [s.command for s in read_source(trial)[0].steps] == [s.command for s in t.steps]
    assert main(["detect", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("1 file(s), 1 trajectories, 7 steps")
    # a continuation that is missing is an error naming it, not a shorter episode
    (trial / "agent" / "trajectory.cont-1.json").unlink()
    with pytest.raises(TrajectoryFileError, match=r"trajectory.json: the episode continues in trajectory.cont-1.json"):
        read_source(trial / "agent" / "trajectory.json")


def test_openhands_calls_written_as_text_are_read_as_calls():
    # OpenHands with function calling off writes <function=...><parameter=...> in the message, no tool_calls
    [t] = read_source(DATA / "atif" / "harbor_golden_openhands_hello_world_no_function_calling.trajectory.json")
    assert [s.command for s in t.steps] == ["cat > /app/hello.txt << 'EOF'\nHello, world!\nEOF", "tool:finish"]
    # the observation's metadata trailer gives the exit code and is not part of the command's output
    assert (t.steps[0].output, t.steps[0].exit_code) == ("", 0)
    assert t.steps[0].raw.startswith("<function=execute_bash>")
    assert t.steps[1].meta["submission"] and t.exit_reason == "submitted"


@pytest.mark.parametrize("content, output, code", [
    ("ls: cannot access 'x'\n[The command completed with exit code 2.]\n[Current working directory: /app]\n"
     "[Python interpreter: /usr/bin/python]\n[Command finished with exit code 2]", "ls: cannot access 'x'", 2),
    ("Killed\n[The command completed with exit code 137.]", "Killed", 137),
    ("[Current working directory: /app] is what I printed", "[Current working directory: /app] is what I printed", None),
])
def test_openhands_observation_trailers_give_the_exit_code(content, output, code):
    from mirl.sources.atif import _output

    step = Step(reasoning="", command="ls x")
    _output(step, content)
    assert (step.output, step.exit_code) == (output, code)
