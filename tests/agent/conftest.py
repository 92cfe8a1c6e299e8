import pytest
from agent_doubles import make_task


@pytest.fixture
def task(tmp_path):
    return make_task(tmp_path)
