"""Every code block of README.md runs as written.

A ```python block runs against the test database, unless the line before it is
``<!-- not run: the reason -->``. A block whose first line is ``# some/module.py`` runs as the module
``some.module`` (so later blocks can import it); the blocks of one module run into the same module, in
order. The README's ``shop`` app is the example project's for its models (``shop.models``). Each
```sh block's ``python manage.py …`` lines must name a command and options that parse.
"""

from __future__ import annotations

import re
import shlex
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class
from django.test import RequestFactory

from django_jobq import registry, tasks
from django_jobq.models import Job, JobStatus
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.p1]

README = ROOT / "README.md"
# Modules the README imports that are the example project's (the README's shop is that shop).
ALIASES = {"shop.models": "example_project.shop.models"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")
MODULE_HEADER = re.compile(r"#\s*(?P<path>[\w/]+)\.py\s*$")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    section: str
    not_run: str | None  # the reason, when marked not to run

    @property
    def module(self) -> str | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = MODULE_HEADER.fullmatch(first.strip())
        return match["path"].replace("/", ".") if match else None

    @property
    def id(self) -> str:
        return f"{self.section}:{self.line}"


def readme_blocks(path: Path = README) -> list[Block]:
    blocks, section, previous = [], "", ""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            section = line.lstrip("#").strip()
        fence = re.match(r"^```(?P<language>[\w-]*)\s*$", line)
        if fence:
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            marker = NOT_RUN.search(previous)
            blocks.append(
                Block(
                    fence["language"], "\n".join(body) + "\n", start + 1, section, marker and marker["reason"]
                )
            )
            previous = ""
        elif line.strip():
            previous = line
        i += 1
    return blocks


BLOCKS = readme_blocks()
PYTHON = [block for block in BLOCKS if block.language == "python"]
RUNNABLE = [block for block in PYTHON if block.not_run is None]


@pytest.fixture
def readme_modules(monkeypatch):
    """Run README blocks as modules in a sandbox: sys.modules and the task registry are restored after."""
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    saved = dict(sys.modules)
    for name, target in ALIASES.items():
        __import__(target)
        sys.modules[name] = sys.modules[target]

    def run(block: Block) -> dict:
        name = block.module
        if name is None:
            namespace: dict = {"__name__": "readme"}
            exec(compile(block.code, f"README.md:{block.line}", "exec"), namespace)
            return namespace
        parts = name.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package not in sys.modules:
                module = types.ModuleType(package)
                module.__path__ = []
                sys.modules[package] = module
        module = sys.modules.get(name) or types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(block.code, f"README.md:{block.line}", "exec"), module.__dict__)
        return module.__dict__

    yield run
    for name in set(sys.modules) - set(saved):
        del sys.modules[name]


def test_the_readme_has_runnable_blocks_and_says_why_the_others_do_not_run():
    assert len(RUNNABLE) >= 4, "the README parser found too few ```python blocks"
    sections = {block.section for block in RUNNABLE}
    assert {"Using it in your project", "Tasks"} <= sections
    for block in PYTHON:
        assert block.not_run is None or block.not_run.strip(), f"{block.id}: 'not run' needs a reason"


@pytest.mark.django_db
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_readme_python_block_runs(block, readme_modules):
    """The block runs after every module block before it (its imports), against the test database."""
    for earlier in PYTHON[: PYTHON.index(block)]:
        if earlier.module and earlier.not_run is None:
            readme_modules(earlier)
    readme_modules(block)


@pytest.mark.django_db
def test_readme_checkout_view_enqueues_the_receipt_with_the_order(readme_modules):
    for block in RUNNABLE:
        if block.module:
            readme_modules(block)
    checkout = sys.modules["shop.views"].checkout
    request = RequestFactory().post("/checkout/", {"email": "ada@example.com", "total_cents": "1200"})
    response = checkout(request)
    assert response.status_code == 201
    job = Job.objects.get()
    assert (job.task, job.queue, job.priority, job.status) == (
        "shop.send_receipt",
        "emails",
        10,
        JobStatus.PENDING,
    )
    assert job.dedupe_key == f"receipt:{job.payload['order_id']}"
    assert tasks.get_task("shop.send_receipt")(order_id=1) == {"sent": True}


@pytest.mark.django_db(transaction=True)
def test_readme_task_with_a_context_reports_progress_and_gives_up_on_a_bad_row(readme_modules):
    """The Tasks section's example, run by a worker: progress and result, and PermanentError -> DEAD."""
    from django_jobq.worker import Worker

    for block in RUNNABLE:
        if block.module:
            readme_modules(block)
    task = tasks.get_task("shop.import_catalogue")
    good = task.enqueue(rows=[{"sku": "a"}, {"sku": "b"}])
    bad = task.enqueue(rows=[{"sku": "a"}, {"name": "no sku"}])
    Worker({"default": 1}, burst=True).run()
    done, dead = Job.objects.get(pk=good), Job.objects.get(pk=bad)
    assert (done.status, done.result, done.progress) == (
        JobStatus.DONE,
        {"imported": 2, "attempt": 1},
        {"done": 2, "total": 2},
    )
    assert (dead.status, dead.attempts) == (JobStatus.DEAD, 1)  # permanent: no retry
    assert "row 2 has no sku" in dead.last_error


SH_COMMAND = re.compile(r"^\s*python manage\.py\s+(?P<args>.*?)\s*(#.*)?$")


def manage_lines() -> list[tuple[str, str]]:
    found = []
    for block in BLOCKS:
        if block.language in ("sh", "bash", "console") and block.not_run is None:
            for offset, line in enumerate(block.code.splitlines(), start=1):
                match = SH_COMMAND.match(line)
                if match:
                    found.append((f"{block.id}+{offset}", match["args"]))
    return found


@pytest.mark.parametrize(("where", "args"), manage_lines(), ids=[where for where, _ in manage_lines()])
def test_readme_manage_py_lines_name_real_commands_and_options(where, args):
    name, *options = shlex.split(args)
    commands = get_commands()
    assert name in commands, f"{where}: no command {name!r}"
    parser = load_command_class(commands[name], name).create_parser("manage.py", name)
    parser.parse_args(options)  # exits (SystemExit) on an unknown option or a bad value
