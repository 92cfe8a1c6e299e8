"""Terminal tasks: one typed record read from Harbor or Terminal-Bench 1 task directories.

Harbor layout::

    instruction.md  task.toml  environment/Dockerfile (or [environment] docker_image, or a
    docker-compose.yaml whose only service is `main`)
    tests/test.sh (+ files)    solution/solve.sh (optional)
    steps/<name>/instruction.md, tests/, solution/ (a multi-step task, with [[steps]] in task.toml)

Terminal-Bench 1 layout::

    task.yaml (instruction, max_agent_timeout_sec, max_test_timeout_sec, ...)
    Dockerfile (or a docker-compose.yaml whose only service is `client`)
    run-tests.sh (optional: a default runs pytest on tests/test_outputs.py)  tests/  solution.sh (optional)

Both become a `Task`; sandboxes and agents never look at the files themselves.
"""

from mirl.tasks.model import Task, TaskProblem, TaskInvalid, TaskStep
from mirl.tasks.loader import load_task, find_tasks, validate_task, without_tasks

__all__ = ["Task", "TaskProblem", "TaskInvalid", "TaskStep", "load_task", "find_tasks", "validate_task", "without_tasks"]
