"""Every code block of README.md and of the documentation's pages (PAGES) runs as written.

A ```python block runs against the test database, unless the line before it is
``<!-- not run: the reason -->``. A block whose first line is ``# some/module.py`` runs as the module
``some.module`` (so later blocks of the same page can import it); the blocks of one module run into the
same module, in order. Each page runs in a sandbox of its own (its modules and the tasks it registers
are gone after each test). The ``shop`` app of the examples is the example project's for its models
(``shop.models``); the documentation's pages after Getting started build on the ``shop`` app it
defines, so their sandbox first runs Getting started's module blocks. Each ```sh block's
``python manage.py …`` lines must name a command and options that parse.
"""

from __future__ import annotations

import re
import shlex
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class
from django.test import RequestFactory
from django.urls import clear_url_caches, resolve

from django_jobq import registry, tasks
from django_jobq.models import Job, JobStatus
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.p1]

README = ROOT / "README.md"
GETTING_STARTED = "docs/getting-started.md"
# The pages whose blocks run here: the README, the documentation's pages made from it (TOP_LEVEL and
# every page under FOLDERS) and the older pages with examples that run as they are (OLDER). Pages
# with tests of their own (testing.md, flow-control-pause.md, inbound-dedupe.md) are left to them.
TOP_LEVEL = ("index", "getting-started", "guarantees", "performance", "development")
OLDER = ("admin", "rate-limits", "reliability", "scheduler", "scheduling")
FOLDERS = ("guide", "operations", "reference")
PAGES = [
    "README.md",
    *(f"docs/{name}.md" for name in (*TOP_LEVEL, *OLDER)),
    *sorted(str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / "docs" / folder).glob("*.md")),
]
# Modules the examples import that are the example project's (the docs' shop is that shop).
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
    page: str = "README.md"  # the file, relative to the repository's root

    @property
    def module(self) -> str | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = MODULE_HEADER.fullmatch(first.strip())
        return match["path"].replace("/", ".") if match else None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def readme_blocks(path: Path = README) -> list[Block]:
    """The fenced code blocks of one Markdown file, in order."""
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
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
                    fence["language"],
                    "\n".join(body) + "\n",
                    start + 1,
                    section,
                    marker and marker["reason"],
                    page,
                )
            )
            previous = ""
        elif line.strip():
            previous = line
        i += 1
    return blocks


BLOCKS = {page: readme_blocks(ROOT / page) for page in PAGES}
PYTHON = {page: [block for block in blocks if block.language == "python"] for page, blocks in BLOCKS.items()}
RUNNABLE = [block for blocks in PYTHON.values() for block in blocks if block.not_run is None]


def base_of(page: str) -> str | None:
    """The page whose module blocks a page's examples build on."""
    return GETTING_STARTED if page.startswith("docs/") and page != GETTING_STARTED else None


@pytest.fixture
def page_modules(monkeypatch):
    """Run blocks as modules in a sandbox: sys.modules, the task registry and the URL caches are
    restored after."""
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    saved = dict(sys.modules)
    for name, target in ALIASES.items():
        __import__(target)
        sys.modules[name] = sys.modules[target]
    clear_url_caches()

    def run(block: Block) -> dict:
        name = block.module
        filename = f"{block.page}:{block.line}"
        if name is None:
            namespace: dict = {"__name__": "docs_example"}
            exec(compile(block.code, filename, "exec"), namespace)
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
        exec(compile(block.code, filename, "exec"), module.__dict__)
        return module.__dict__

    yield run
    clear_url_caches()
    for name in set(sys.modules) - set(saved):
        del sys.modules[name]


def run_modules_of(page: str, run: Callable[[Block], dict], before: Block | None = None) -> None:
    """Run the module blocks a page builds on, then its own module blocks (those before ``before``)."""
    base = base_of(page)
    if base is not None:
        run_modules_of(base, run)
    for block in PYTHON[page]:
        if block is before:
            return
        if block.module and block.not_run is None:
            run(block)


def test_the_pages_have_runnable_blocks_and_say_why_the_others_do_not_run():
    assert len([b for b in PYTHON["README.md"] if b.not_run is None]) >= 4, "too few README blocks found"
    sections = {block.section for block in RUNNABLE if block.page == "README.md"}
    assert "Using it in your project" in sections
    assert {b.module for b in PYTHON[GETTING_STARTED] if b.not_run is None} >= {
        "settings",
        "shop.tasks",
        "shop.views",
        "shop.urls",
        "mysite.urls",
    }
    assert any("import_catalogue" in b.code for b in PYTHON["docs/guide/tasks.md"] if b.not_run is None)
    assert len(RUNNABLE) >= 18, "the docs parser found too few ```python blocks"
    for blocks in PYTHON.values():
        for block in blocks:
            assert block.not_run is None or block.not_run.strip(), f"{block.id}: 'not run' needs a reason"


@pytest.mark.django_db
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_python_block_runs(block, page_modules):
    """The block runs after the module blocks before it (its imports), against the test database."""
    run_modules_of(block.page, page_modules, before=block)
    page_modules(block)


def test_the_shop_model_shown_is_the_example_projects():
    """The docs show ``shop/models.py`` without running it (the example project's app defines it):
    it must be that file, as it is."""
    shown = [b for blocks in PYTHON.values() for b in blocks if b.module == "shop.models"]
    assert {b.page for b in shown} >= {"README.md", GETTING_STARTED}
    source = (ROOT / "example_project" / "shop" / "models.py").read_text(encoding="utf-8")
    for block in shown:
        shown_source = block.code.split("\n", 1)[1]
        assert shown_source.strip() == source.strip(), f"{block.id} is not the example's shop/models.py"


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["README.md", GETTING_STARTED])
def test_the_checkout_view_at_its_url_enqueues_the_receipt_with_the_order(page, page_modules):
    run_modules_of(page, page_modules)
    checkout = sys.modules["shop.views"].checkout
    assert resolve("/shop/checkout/", urlconf="mysite.urls").func is checkout
    request = RequestFactory().post("/shop/checkout/", {"email": "ada@example.com", "total_cents": "1200"})
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
    assert checkout(RequestFactory().get("/shop/checkout/")).status_code == 405  # POST only


@pytest.mark.django_db(transaction=True)
def test_the_long_task_reports_progress_and_gives_up_on_a_bad_row(page_modules):
    """docs/guide/tasks.md's example, run by a worker: progress and result, and PermanentError -> DEAD."""
    from django_jobq.worker import Worker

    run_modules_of("docs/guide/tasks.md", page_modules)
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
    for blocks in BLOCKS.values():
        for block in blocks:
            if block.language in ("sh", "bash", "console") and block.not_run is None:
                for offset, line in enumerate(block.code.splitlines(), start=1):
                    match = SH_COMMAND.match(line)
                    if match:
                        found.append((f"{block.id}+{offset}", match["args"]))
    return found


MANAGE_LINES = manage_lines()


def test_the_pages_name_the_commands_they_document():
    named = {shlex.split(args)[0] for _, args in MANAGE_LINES}
    assert {"jobq_worker", "jobq_reap", "jobq_scheduler"} <= named


@pytest.mark.parametrize(("where", "args"), MANAGE_LINES, ids=[where for where, _ in MANAGE_LINES])
def test_manage_py_lines_name_real_commands_and_options(where, args):
    name, *options = shlex.split(args)
    commands = get_commands()
    assert name in commands, f"{where}: no command {name!r}"
    parser = load_command_class(commands[name], name).create_parser("manage.py", name)
    parser.parse_args(options)  # exits (SystemExit) on an unknown option or a bad value
