"""Testing code that enqueues jobs: run them in the test (``run_jobs``, ``drain``), run them at every
enqueue (``eager``), and assert what was enqueued. For pytest: ``pytest_plugins =
["django_jobq.testing.plugin"]`` gives the ``jobq`` and ``jobq_eager`` fixtures."""

from .assertions import assert_enqueued, assert_not_enqueued, enqueued
from .eager import eager
from .runner import JobsFailed, JobsRun, RunRecord, drain, run_jobs

__all__ = [
    "JobsFailed",
    "JobsRun",
    "RunRecord",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "eager",
    "enqueued",
    "run_jobs",
]
