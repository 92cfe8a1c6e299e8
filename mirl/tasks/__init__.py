"""Terminal tasks: one typed record read from Harbor or Terminal-Bench 1 task directories.

Harbor layout::

    instruction.md  task.toml  environment/Dockerfile (or [environment] docker_image)
    tests/test.sh (+ files)    solution/solve.sh (optional)

Terminal-Bench 1 layout::

    task.yaml (instruction, max_agent_timeout_sec, max_test_timeout_sec, ...)
    Dockerfile  run-tests.sh  tests/  solution.sh (optional)

Both become a `Task`; sandboxes and agents never look at the files themselves.
"""

from mirl.tasks.model import Task, TaskProblem, TaskInvalid
from mirl.tasks.loader import load_task, find_tasks, validate_task

__all__ = ["Task", "TaskProblem", "TaskInvalid", "load_task", "find_tasks", "validate_task"]
