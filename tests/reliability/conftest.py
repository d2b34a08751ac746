import json

import pytest

from tests.servers import pgcluster

from .support import FIGURES, Processes


@pytest.fixture
def processes(tmp_path, request):
    """Start management-command processes; every one still running is stopped at teardown."""
    env = getattr(request, "param", None) or {}
    procs = Processes(tmp_path, env)
    yield procs
    procs.stop_all()


@pytest.fixture
def restartable():
    """Skip, with the reason, where the test database's cluster cannot be restarted from here."""
    problem = pgcluster.restart_problem()
    if problem:
        pytest.skip(problem)


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("reliability figures")
        for line in FIGURES:
            terminalreporter.write_line(json.dumps(line, default=str))
