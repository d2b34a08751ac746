"""docs/testing.md's examples run as a user runs them: its ``# shop/test_*.py`` blocks written out as a
project's test modules and run by pytest in a fresh process (pytest-django, the fixtures plugin, the
example site's ``shop`` app), each test passing."""

import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tests.integration.test_readme import readme_blocks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC = ROOT / "docs" / "testing.md"
CONFTEST = textwrap.dedent(
    '''
    import importlib
    import sys

    pytest_plugins = ["django_jobq.testing.plugin"]


    def pytest_sessionstart(session):
        """The docs' ``shop`` is the example site's app (one module, so its tasks register once)."""
        for name in ("shop", "shop.models", "shop.tasks"):
            sys.modules[name] = importlib.import_module(f"example_project.{name}")
    '''
)


def test_the_testing_docs_examples_pass_under_pytest(tmp_path):
    written = []
    for block in readme_blocks(DOC):
        if block.language == "python" and block.not_run is None and block.module:
            path = tmp_path / "docs_tests" / (block.module.rpartition(".")[2] + ".py")
            path.parent.mkdir(exist_ok=True)
            path.write_text(block.code.split("\n", 1)[1], encoding="utf-8")
            written.append(path.name)
    assert len(written) >= 4, f"too few example modules in {DOC.name}: {written}"
    (tmp_path / "docs_tests" / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--ds", "tests.settings.sqlite",
         "--rootdir", str(tmp_path), "-W", "error", str(tmp_path / "docs_tests")],
        cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed[1]) >= 5, run.stdout[-2000:]  # every example test ran
