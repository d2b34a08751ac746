"""Django's own ``tests/tasks/`` suite, run against JobqBackend (docs/guide/django-tasks.md, "Conformance").

The suite is not copied here: it is read from the source distribution of the Django version installed
(``pip download`` once per version, kept under ~/.cache/django-jobq/; or JOBQ_DJANGO_TASKS_TESTS, the
path of a copy of Django's ``tests/tasks`` folder), so each Django runs its own tests. Every test class of the
suite is subclassed here with TASKS pointing at JobqBackend, on a TestCase (each test rolled back)
since the backend writes rows. A test of the Dummy or Immediate backend's own behaviour is adapted
(``@adapted``: the same assertions at a queue's timing) or left out (``@not_applicable``), each with its
reason; ADAPTED and NOT_APPLICABLE list them, and the guide lists the same. Every other test runs
unmodified. Django 5.2's backport (django-tasks) ships no tests in its source distribution: nothing
runs there.
"""

from __future__ import annotations

import dataclasses
import fcntl
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
import pytest

if django.VERSION < (6, 0):
    pytest.skip("django.tasks arrived in Django 6.0 (the backport ships no tests)", allow_module_level=True)

from asgiref.sync import sync_to_async
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import TestCase, override_settings

from django_jobq.backend import JobqBackend
from django_jobq.testing import run_jobs
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.django_facing]

JOBQ_BACKEND = "django_jobq.backend.JobqBackend"
# Django's backends run a task once: a failed attempt is final (JobqBackend retries by default).
DJANGO_WAY = {"MAX_ATTEMPTS": 1}
SUITE_MODULES = ("test_tasks", "test_dummy_backend", "test_immediate_backend", "test_custom_backend")


def django_suite_dir() -> Path:
    """The folder holding Django's ``tasks`` test package for the installed version (fetched once)."""
    if given := os.environ.get("JOBQ_DJANGO_TASKS_TESTS"):
        return Path(given).resolve().parent
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "django-jobq" / "django-tests"
    here = cache / django.__version__
    if (here / "tasks" / "__init__.py").exists():
        return here
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # xdist's workers collect at once: one fetches
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (here / "tasks" / "__init__.py").exists():
            _fetch(django.__version__, here)
    return here


def _fetch(version: str, into: Path) -> None:
    with tempfile.TemporaryDirectory(dir=into.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"Django=={version}", "--dest", tmp],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        (archive,) = Path(tmp).glob("*.tar.gz")
        staged = Path(tmp) / "staged"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and "/tests/tasks/" in m.name]
            for member in members:
                member.name = "tasks/" + member.name.split("/tests/tasks/", 1)[1]
            tar.extractall(staged, members=members, filter="data")
        if not (staged / "tasks" / "__init__.py").exists():
            raise RuntimeError(f"Django {version}'s source distribution has no tests/tasks")
        staged.rename(into)


def _load_suite() -> dict[str, Any]:
    """Django's test modules, imported as the package ``tasks`` (its tests expect that module path)."""
    where = str(django_suite_dir())
    if where not in sys.path:
        sys.path.insert(0, where)
    return {name: importlib.import_module(f"tasks.{name}") for name in SUITE_MODULES}


SUITE = _load_suite()
test_tasks = importlib.import_module("tasks.tasks")

# The adapted and not applicable tests, "Class.test": reason (checked against the guide below).
ADAPTED: dict[str, str] = {}
NOT_APPLICABLE: dict[str, str] = {}


def adapted(reason: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a test that replaces Django's test of the same name: the same checks at a queue's timing."""

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        method.jobq_adapted = reason  # type: ignore[attr-defined]
        return method

    return mark


def not_applicable(reason: str) -> Callable[..., Any]:
    """Replace a test of the Immediate or Dummy backend's own behaviour that JobqBackend does not share."""

    def skipped(self: Any) -> None:
        pytest.skip(f"not applicable to JobqBackend: {reason}")

    skipped.jobq_not_applicable = reason  # type: ignore[attr-defined]
    return skipped


def on_jobq(django_class_name: str, module: str, tasks: dict[str, Any]) -> Callable[[type], type]:
    """Make the decorated class a subclass of Django's test class, on a TestCase with ``tasks`` as TASKS,
    and record its adapted and not applicable tests (each must still exist in Django's class)."""
    base = getattr(SUITE[module], django_class_name)

    def build(ours: type) -> type:
        namespace = {k: v for k, v in vars(ours).items() if k not in ("__dict__", "__weakref__")}
        namespace["available_apps"] = None  # every app: the job table is rolled back with the test
        cls = type(f"Jobq{django_class_name}", (base, TestCase), namespace)
        for name, value in vars(ours).items():
            for kind, registry in (("jobq_adapted", ADAPTED), ("jobq_not_applicable", NOT_APPLICABLE)):
                if (reason := getattr(value, kind, None)) is not None:
                    if not hasattr(base, name):
                        raise AssertionError(f"{django_class_name}.{name}: no such test in Django's suite")
                    registry[f"{django_class_name}.{name}"] = reason
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
        return override_settings(TASKS=tasks)(cls)

    return build


def jobq(queues: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"BACKEND": JOBQ_BACKEND, **({} if queues is None else {"QUEUES": queues}), **extra}


class RunsAtEnqueue(JobqBackend):
    """JobqBackend whose enqueue() returns once the queue has run the job, as ImmediateBackend's does:
    the job is claimed, run and written by the worker's own code (run_jobs), then read back."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        run_jobs()
        return self.get_result(result.id)


RUNS_AT_ENQUEUE = f"{__name__}.RunsAtEnqueue"
NOT_DUMMY = "asserts the Dummy backend's class; here it is JobqBackend"
NOT_IMMEDIATE = "asserts the Immediate backend's class; here it is JobqBackend"
MEMORY = (
    "the Dummy backend keeps results in memory, so Django's test calls the synchronous get_result() "
    "from async code; a database-backed backend's synchronous call belongs in sync_to_async()"
)


# -- tests/tasks/test_tasks.py ------------------------------------------------------------------------
@on_jobq(
    "TaskTestCase",
    "test_tasks",
    {
        "default": jobq(["default", "queue_1"]),
        "immediate": {"BACKEND": RUNS_AT_ENQUEUE, "QUEUES": [], "OPTIONS": DJANGO_WAY},
        "missing": {"BACKEND": "does.not.exist"},
    },
)
class TaskTestCase:
    def setUp(self) -> None:  # Django's clears the Dummy backend's memory; the test's rollback does it here
        pass

    @adapted(NOT_DUMMY)
    def test_using_correct_backend(self: Any) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobqBackend)

    @adapted("reads the result back instead of the Dummy backend's in-memory list")
    def test_enqueue_task(self: Any) -> None:
        result = test_tasks.noop_task.enqueue()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(result.task, test_tasks.noop_task)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})

        self.assertEqual(default_task_backend.get_result(result.id), result)

    @adapted("reads the result back instead of the Dummy backend's in-memory list")
    async def test_enqueue_task_async(self: Any) -> None:
        result = await test_tasks.noop_task.aenqueue()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(result.task, test_tasks.noop_task)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})

        self.assertEqual(await default_task_backend.aget_result(result.id), result)

    @adapted(MEMORY)
    async def test_refresh_result(self: Any) -> None:
        result = await test_tasks.noop_task.aenqueue()

        original_result = dataclasses.asdict(result)

        await sync_to_async(result.refresh)()

        self.assertEqual(dataclasses.asdict(result), original_result)

        await result.arefresh()

        self.assertEqual(dataclasses.asdict(result), original_result)

    @adapted(MEMORY)
    async def test_get_missing_result(self: Any) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await sync_to_async(test_tasks.noop_task.get_result)("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await test_tasks.noop_task.aget_result("123")

    @adapted("asserts the Dummy and Immediate backends' classes; here both aliases are JobqBackend")
    def test_get_backend(self: Any) -> None:
        self.assertEqual(test_tasks.noop_task.backend, "default")
        self.assertIsInstance(test_tasks.noop_task.get_backend(), JobqBackend)

        immediate_task = test_tasks.noop_task.using(backend="immediate")
        self.assertEqual(immediate_task.backend, "immediate")
        self.assertIsInstance(immediate_task.get_backend(), JobqBackend)


# -- tests/tasks/test_dummy_backend.py ----------------------------------------------------------------
@on_jobq("DummyBackendTestCase", "test_dummy_backend", {"default": jobq([])})
class DummyBackendTestCase:
    def setUp(self) -> None:  # Django's clears the Dummy backend's memory; the test's rollback does it here
        pass

    @adapted(NOT_DUMMY)
    def test_using_correct_backend(self: Any) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobqBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    @adapted("reads the result back instead of the Dummy backend's in-memory list")
    def test_enqueue_task(self: Any) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = task.enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(default_task_backend.get_result(result.id), result)

    @adapted("reads the result back instead of the Dummy backend's in-memory list")
    async def test_enqueue_task_async(self: Any) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await task.aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(await default_task_backend.aget_result(result.id), result)

    @adapted("runs the queue where Django's test sets the Dummy backend's stored status to SUCCESSFUL")
    def test_refresh_result(self: Any) -> None:
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})

        run_jobs()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @adapted("runs the queue where Django's test sets the Dummy backend's stored status to SUCCESSFUL")
    async def test_refresh_result_async(self: Any) -> None:
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, (), {})

        await sync_to_async(run_jobs)()

        self.assertEqual(result.status, TaskResultStatus.READY)
        await result.arefresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @adapted(MEMORY)
    async def test_get_missing_result(self: Any) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await sync_to_async(default_task_backend.get_result)("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    test_clear = not_applicable("clear() empties the Dummy backend's memory; a queue has no such method")

    @adapted("TASKS names JobqBackend where Django's test names the Dummy backend")
    def test_validate_on_enqueue(self: Any) -> None:
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with (
            override_settings(TASKS={"default": jobq(["queue-1"])}),
            self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"),
        ):
            task_with_custom_queue_name.enqueue()

    @adapted("TASKS names JobqBackend where Django's test names the Dummy backend")
    async def test_validate_on_aenqueue(self: Any) -> None:
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with (
            override_settings(TASKS={"default": jobq(["queue-1"])}),
            self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"),
        ):
            await task_with_custom_queue_name.aenqueue()


@on_jobq("DummyBackendTransactionTestCase", "test_dummy_backend", {"default": jobq()})
class DummyBackendTransactionTestCase:
    @adapted(
        "TASKS names JobqBackend where Django's test names the Dummy backend; the row is read back "
        "instead of the Dummy backend's in-memory list"
    )
    def test_doesnt_wait_until_transaction_commit_by_default(self: Any) -> None:
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(default_task_backend.get_result(result.id), result)

        self.assertEqual(default_task_backend.get_result(result.id), result)


# -- tests/tasks/test_immediate_backend.py ------------------------------------------------------------
@on_jobq(
    "ImmediateBackendTestCase",
    "test_immediate_backend",
    {"default": {"BACKEND": RUNS_AT_ENQUEUE, "QUEUES": [], "OPTIONS": DJANGO_WAY}},
)
class ImmediateBackendTestCase:
    @adapted(NOT_IMMEDIATE)
    def test_using_correct_backend(self: Any) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobqBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, DJANGO_WAY)

    @adapted(
        "ImmediateBackend lets KeyboardInterrupt stop the caller; on a queue it fails the attempt like any "
        "other exception (never stopping the worker), so the result is FAILED and logged at ERROR"
    )
    def test_throws_keyboard_interrupt(self: Any) -> None:
        with self.assertLogs("django.tasks", level="ERROR"):
            result = default_task_backend.enqueue(test_tasks.failing_task_keyboard_interrupt, [], {})

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)

    test_cannot_get_result = not_applicable(
        "asserts that ImmediateBackend has no get_result(); JobqBackend reads results from any process"
    )
    test_cannot_refresh_result = not_applicable(
        "asserts that ImmediateBackend cannot refresh a result; JobqBackend can"
    )
    test_cannot_pass_run_after = not_applicable(
        "asserts that ImmediateBackend refuses run_after; JobqBackend supports it (supports_defer)"
    )

    @adapted("TASKS names JobqBackend where Django's test names the Immediate backend")
    def test_validate_on_enqueue(self: Any) -> None:
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with (
            override_settings(TASKS={"default": jobq(["queue-1"])}),
            self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"),
        ):
            task_with_custom_queue_name.enqueue()

    @adapted("TASKS names JobqBackend where Django's test names the Immediate backend")
    async def test_validate_on_aenqueue(self: Any) -> None:
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with (
            override_settings(TASKS={"default": jobq(["queue-1"])}),
            self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"),
        ):
            await task_with_custom_queue_name.aenqueue()


@on_jobq(
    "ImmediateBackendTransactionTestCase",
    "test_immediate_backend",
    {"default": {"BACKEND": RUNS_AT_ENQUEUE, "OPTIONS": DJANGO_WAY}},
)
class ImmediateBackendTransactionTestCase:
    pass


# -- tests/tasks/test_custom_backend.py: Django's base backend with the suite's own custom backends --------
# These involve no JobqBackend: they run as they are (with the suite's tasks, which are JobqTasks).
AS_IS = ("CustomBackendTestCase", "CustomTaskTestCase")  # CustomTaskTestCase: Django 6.1 on
globals().update(
    {
        name: getattr(SUITE["test_custom_backend"], name)
        for name in AS_IS
        if hasattr(SUITE["test_custom_backend"], name)
    }
)


def test_every_class_of_the_suite_runs_here():
    """A test class Django adds to the suite is noticed: it must be run on JobqBackend or as it is."""
    from unittest import TestCase as UnitTest

    ours = {cls.__name__.removeprefix("Jobq") for cls in globals().values() if isinstance(cls, type)}
    theirs = {
        name
        for module in SUITE.values()
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, UnitTest) and value.__module__ == module.__name__
    }
    assert theirs <= ours | set(AS_IS), sorted(theirs - ours - set(AS_IS))


# -- the adaptations are the guide's --------------------------------------------------------------------
def test_the_guide_lists_every_adapted_and_not_applicable_test():
    guide = (ROOT / "docs" / "guide" / "django-tasks.md").read_text()
    missing = [name for name in (*ADAPTED, *NOT_APPLICABLE) if f"`{name}`" not in guide]
    assert not missing, f"docs/guide/django-tasks.md does not list {missing}"
    assert len(ADAPTED) + len(NOT_APPLICABLE) > 0
