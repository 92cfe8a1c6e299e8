"""The RaR+ rubric writer: the rubric's rules, the LLM writer over HTTP, the offline stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.reference_teacher import TeacherUnavailable, plan_steps
from mirl.roles.rubric_judge import RuleRubricJudge
from mirl.roles.rubric_writer import (
    LLMRubricWriter,
    ReferenceRubricWriter,
    Rubric,
    RubricInvalid,
    RubricItem,
    load_rubrics,
    save_rubrics,
)
from mirl.tasks import load_task
from tests.conftest import write_task

BUNDLED = Path(__file__).resolve().parents[2] / "tasks"


def items(n: int, **over) -> list[RubricItem]:
    return [RubricItem(**{"text": f"item {k}", "weight": 1.0, "kind": "Optional", **over}) for k in range(n)]


# --- the rules ------------------------------------------------------------------------------------


def test_a_rubric_has_7_to_20_items():
    assert len(Rubric("t", items(7), 0.5).items) == 7
    assert len(Rubric("t", items(20), 1.0).items) == 20
    with pytest.raises(RubricInvalid, match="7 to 20 items, got 6"):
        Rubric("t", items(6), 0.8)
    with pytest.raises(RubricInvalid, match="7 to 20 items, got 21"):
        Rubric("t", items(21), 0.8)


@pytest.mark.parametrize("w", [0.49, 1.01, True, "0.8", None])
def test_tests_weight_lies_in_half_to_one(w):
    with pytest.raises(RubricInvalid, match=r"tests_weight must be a number in \[0.5, 1.0\]"):
        Rubric("t", items(7), w)


@pytest.mark.parametrize("field,value,message", [
    ("kind", "Critical", "kind 'Critical' is not one of Essential, Important, Optional, Pitfall"),
    ("weight", 0, "an Optional item's weight must be from 1 to 5, got 0"),
    ("weight", -2.0, "an Optional item's weight must be from 1 to 5, got -2.0"),
    ("weight", 6, "an Optional item's weight must be from 1 to 5, got 6"),
    ("weight", float("nan"), "weight must be a number"),
    ("weight", True, "weight must be a number"),
    ("text", "  ", "text is empty"),
    ("check", "stdout:done", "must start with 'command:' or 'output:'"),
    ("check", "command:(", "is not a valid regex"),
    ("check", "output:", "has an empty regex"),
])
def test_a_bad_item_is_named_with_what_is_wrong(field, value, message):
    bad = items(7)
    bad[4] = RubricItem(**{"text": "item 4", "weight": 1.0, "kind": "Optional", field: value})
    with pytest.raises(RubricInvalid) as e:
        Rubric("count-lines", bad, 0.8)
    assert "item 4" in str(e.value) and message in str(e.value) and "count-lines" in str(e.value)


def test_every_problem_is_listed_at_once():
    bad = items(6, kind="Must")
    with pytest.raises(RubricInvalid) as e:
        Rubric("t", bad, 2.0)
    text = str(e.value)
    assert "got 6" in text and text.count("kind 'Must'") == 6 and "tests_weight" in text


def test_records_round_trip_and_bad_records_name_the_file_and_line(tmp_path):
    r = Rubric("t", items(6) + [RubricItem("Deletes data", -2.0, "Pitfall", r"command:\brm\b")], 0.7, source="reference")
    assert Rubric.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    path = tmp_path / "rubrics.jsonl"
    save_rubrics(path, [r])
    assert load_rubrics(path) == {"t": r}
    broken = r.to_dict() | {"tests_weight": 0.2}
    path.write_text(json.dumps(r.to_dict()) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(RubricInvalid, match=rf"{path}:2: rubric of task 't': tests_weight"):
        load_rubrics(path)
    path.write_text(json.dumps({"task": "t", "items": [{"text": "x"}], "tests_weight": 0.8}) + "\n")
    with pytest.raises(RubricInvalid, match=rf"{path}:1: item 0 must be an object with text, weight and kind"):
        load_rubrics(path)
    with pytest.raises(RubricInvalid, match="lacks items, tests_weight"):
        Rubric.from_dict({"task": "t"})


# --- the LLM writer -------------------------------------------------------------------------------


@pytest.fixture
def task(tmp_path):
    root = write_task(tmp_path / "count", instruction="Count the lines of /app/data.txt into /app/count.txt.\n",
                      test_sh="#!/bin/bash\npytest /tests/test_outputs.py\n")
    (root / "tests" / "test_outputs.py").write_text("def test_count_matches():\n    assert open('/app/count.txt').read() == '3\\n'\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\nwc -l < /app/data.txt > /app/count.txt\n")
    return load_task(root)


def reply(n: int = 7, tests_weight: float = 0.75, first: str = "Writes the count to /app/count.txt",
          pitfall: float = -2) -> str:
    body = [{"text": first, "kind": "Essential", "weight": 5, "check": r"command:count\.txt"}]
    body += [{"text": f"quality {k}", "kind": "Optional", "weight": 1} for k in range(n - 2)]
    body += [{"text": "Modifies /app/data.txt", "kind": "Pitfall", "weight": pitfall}]
    return "Short plan.\n" + json.dumps({"items": body, "tests_weight": tests_weight})


def test_the_writer_sees_task_solution_and_tests_and_its_reply_becomes_the_rubric(http_role, task):
    client, requests = http_role("rubric_writer", [reply()])
    rubric = LLMRubricWriter(client).write(task)
    [req] = requests
    user = req["messages"][-1]["content"]
    assert "Count the lines of /app/data.txt" in user
    assert "wc -l < /app/data.txt > /app/count.txt" in user  # the reference solution
    assert "def test_count_matches" in user and "pytest /tests/test_outputs.py" in user  # both test files
    assert rubric.task == task.id and rubric.tests_weight == 0.75 and rubric.source == "llm:openai/test-model"
    assert [(i.kind, i.weight) for i in rubric.items] == [("Essential", 5.0)] + [("Optional", 1.0)] * 5 + [("Pitfall", -2.0)]
    assert rubric.items[0].check == r"command:count\.txt" and rubric.items[1].check == ""


@pytest.mark.parametrize("bad,says", [
    ("I would write these items: none.", "no JSON object"),
    (reply(n=6), "at least 7 item"),
    (reply(tests_weight=0.3), "tests_weight must be a number in [0.5, 1.0]"),
    (reply(pitfall=4), "a Pitfall's weight must be -1 or -2, got 4"),  # RaR's rule: pitfalls weigh -1 or -2
    (reply(first="Makes test_count_matches pass"), "names the hidden tests (test_count_matches)"),
    (reply(first="test_outputs.py passes"), "names the hidden tests (test_outputs.py)"),
])
def test_an_unusable_reply_is_reasked_with_what_was_wrong(http_role, task, bad, says):
    client, requests = http_role("rubric_writer", [bad, reply()])
    rubric = LLMRubricWriter(client).write(task)
    assert len(requests) == 2 and len(rubric.items) == 7
    reask = requests[1]["messages"][-1]["content"]
    assert says in reask and requests[1]["messages"][-2]["content"] == bad


def test_a_writer_that_never_replies_usably_fails_and_is_recorded(http_role, task, tmp_path):
    client, requests = http_role("rubric_writer", ["no json here"])
    with pytest.raises(LLMError) as e:
        LLMRubricWriter(client).write(task)
    assert e.value.kind == "invalid_json" and len(requests) == 3
    errors = read_ledger(tmp_path / "run")["error"].fillna("")
    assert errors.str.startswith("invalid_json").sum() == 1


# --- the offline stand-in -------------------------------------------------------------------------


def test_the_offline_rubric_of_count_lines_follows_its_solution():
    """solve.sh is `wc -l < /app/data.txt > /app/count.txt`: it writes count.txt, runs wc, reads data.txt."""
    rubric = ReferenceRubricWriter().write(load_task(BUNDLED / "count-lines"))
    found = {(i.kind, i.text) for i in rubric.items}
    assert ("Essential", "A command writes or creates `count.txt`") in found
    assert ("Important", "Runs `wc`, as the reference solution does") in found
    assert ("Optional", "A command reads or names the input `data.txt`") in found
    assert [i.kind for i in rubric.items].count("Essential") == 1
    assert [i.kind for i in rubric.items].count("Important") == 1
    assert sum(i.kind == "Pitfall" for i in rubric.items) == 5
    assert rubric.tests_weight == 0.8 and rubric.source == "reference" and all(i.check for i in rubric.items)


@pytest.mark.parametrize("name,written", [
    ("binary-header-fields", "header.json"),  # json.dump(out, open("/app/header.json", "w")) in a Python heredoc
    ("python-fix-failing-test", "slug.py"),  # p = Path("textkit/slug.py") ... p.write_text(s)
    ("sqlite-backfill-column", "library.db"),  # sqlite3 library.db <<'SQL' ALTER TABLE ...
    ("fix-permissions", "secrets.env"),  # chmod 600 /app/config/secrets.env
])
def test_files_written_inside_scripts_are_essential(name, written):
    rubric = ReferenceRubricWriter().write(load_task(BUNDLED / name))
    assert f"A command writes or creates `{written}`" in [i.text for i in rubric.items if i.kind == "Essential"]


def test_a_pitfall_the_solution_itself_trips_is_left_out(tmp_path):
    root = write_task(tmp_path / "stop")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\npkill -f worker.py\necho stopped > /app/status.txt\n")
    rubric = ReferenceRubricWriter().write(load_task(root))
    pitfalls = [i.text for i in rubric.items if i.kind == "Pitfall"]
    assert len(pitfalls) == 4 and not any("Kills processes" in p for p in pitfalls)
    assert any("Kills processes" in i.text for i in ReferenceRubricWriter().write(load_task(BUNDLED / "count-lines")).items)


def test_a_task_without_a_solution_has_no_offline_rubric(task_factory):
    with pytest.raises(TeacherUnavailable, match="no reference solution"):
        ReferenceRubricWriter().write(task_factory("bare"))


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLED.iterdir() if (p / "solution" / "solve.sh").is_file()))
def test_replaying_the_reference_meets_every_essential_and_important_item(name):
    """Every bundled task gets a valid rubric, and the reference solution's own steps, run as an
    agent's commands, meet all of its Essential and Important items and trip none of its Pitfalls."""
    task = load_task(BUNDLED / name)
    rubric = ReferenceRubricWriter().write(task)
    steps = [Step(reasoning="", command=p.command, exit_code=0, output="ok")
             for p in plan_steps(Path(task.solution).read_text())]
    rating = RuleRubricJudge().rate(Trajectory(task=task.id, seed=0, models={}, steps=steps), rubric)
    for k, item in enumerate(rubric.items):
        if item.kind in ("Essential", "Important"):
            assert rating.met[k], f"{name}: the reference does not meet {item.text!r} ({item.check})"
        if item.kind == "Pitfall":
            assert not rating.met[k], f"{name}: the reference trips {item.text!r}"
