import pytest
from agent_doubles import make_task

from tests.llm.conftest import make_client  # noqa: F401  (a client over local engines)


@pytest.fixture
def task(tmp_path):
    return make_task(tmp_path)
