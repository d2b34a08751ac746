"""Running queued jobs inside a test: claim, run and write each outcome as a worker does, on the test's
own connection and thread (so a TestCase's transaction sees, and rolls back, all of it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections

from .. import signals
from ..conf import jobq_settings
from ..status import JobStatus
from ..worker.classify import Outcome
from ..worker.runner import SlotRunner

if TYPE_CHECKING:
    from ..models import Job

WORKER_ID = "jobq-testing"  # the worker id the test runner claims as
MAX_RUNS = 10_000  # runs in one call at most: more means a job keeps enqueuing or snoozing itself


class JobsFailed(AssertionError):
    """drain() ran jobs that failed (retried, DEAD) or ran past ``max_runs``; ``run`` holds every run."""

    def __init__(self, message: str, run: JobsRun):
        super().__init__(message)
        self.run = run


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of one job: its status once the run was written, and what the task returned or raised."""

    job_id: int
    task: str
    queue: str
    attempt: int
    status: JobStatus | None  # None: the run no longer owned the job (another runner took it)
    result: Any = None  # the task's return value (a DONE run)
    error: str | None = None  # the traceback (a failed, snoozed or discarded run)

    @property
    def ok(self) -> bool:
        return self.status == JobStatus.DONE


@dataclass(slots=True)
class JobsRun:
    """What run_jobs() did, in order."""

    runs: list[RunRecord] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self.runs)

    @property
    def succeeded(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == JobStatus.DONE]

    @property
    def failed(self) -> list[RunRecord]:
        """Runs that raised and are to be retried or went DEAD."""
        return [
            r for r in self.runs if r.error is not None and r.status in (JobStatus.PENDING, JobStatus.DEAD)
        ]

    @property
    def cancelled(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == JobStatus.CANCELLED]

    def results(self, task: Any = None) -> list[Any]:
        """The return values of the DONE runs (of ``task`` only, a task or its name, when given)."""
        name = None if task is None else task_name(task)
        return [r.result for r in self.succeeded if name is None or r.task == name]


def task_name(task: Any) -> str:
    """The registered name of a django-jobq task, a Django Tasks task, or a name."""
    from ..tasks import Task

    if isinstance(task, str):
        return task
    if isinstance(task, Task):
        return task.name
    if isinstance(path := getattr(task, "module_path", None), str):  # a Django Tasks task
        return path
    raise TypeError(f"not a task or a task name: {task!r:.100}")


@contextmanager
def unlogged(alias: str) -> Iterator[None]:
    """Drop the queries run inside from the connection's query log, so assertNumQueries and
    CaptureQueriesContext count the tasks' own queries and not the runner's claims and writes."""
    log = connections[alias].queries_log
    before = len(log)
    try:
        yield
    finally:
        if len(log) < (log.maxlen or 0):  # a full log has shifted: nothing can be told apart
            while len(log) > before:
                log.pop()


class JobRunner:
    """Claims and runs due jobs one at a time on the calling thread, with the worker's own code for
    the run (middleware, retries, Snooze, Discard, atomic tasks, the signals)."""

    def __init__(self, queues: Sequence[str] | None = None, *, retries: bool = True):
        self.queues = None if queues is None else list(queues)
        self.retries = retries
        self.alias = jobq_settings().database
        self.ran: set[int] = set()  # the jobs run by this runner: each runs once
        self.held: list[tuple[int, int]] = []  # (id, fence): due again, held until close()
        # every retry goes back to the queue, due after its backoff: nothing sleeps in a test
        self.slot = SlotRunner(
            WORKER_ID, threading.Event(), wait_to_retry=lambda delay: delay, own_connections=False
        )

    def close(self) -> None:
        """Give back the jobs held unstarted (PENDING again, their attempts unspent)."""
        from ..models import Job

        self.slot.close()
        with unlogged(self.alias):
            Job.objects.release_unstarted(WORKER_ID, self.held)
        self.held = []

    def _claim(self) -> Job | None:
        """The next due job this runner has not run yet; one it ran (a retry due already) is held,
        RUNNING and unstarted, so the claims go past it, and given back by close()."""
        from ..models import Job

        with unlogged(self.alias):
            while (job := Job.objects.claim(WORKER_ID, queues=self.queues)) is not None:
                if job.id not in self.ran:
                    return job
                self.held.append((job.id, job.fence))
        return None

    def run_next(self) -> RunRecord | None:
        """Run the next due job this runner has not run; None when there is none."""
        job = self._claim()
        if job is None:
            return None
        self.ran.add(job.id)
        fence, attempt = job.fence, job.attempts
        outcome = self.slot.run(job, fence, attempt, lambda attempt, fence: True)
        if not self.retries and outcome.error is not None and not (outcome.discard or outcome.snoozed):
            outcome.permanent, outcome.backoff = True, None  # this failure is final
        with unlogged(self.alias):
            status = self._write(job, outcome)
        self._report(job, outcome, status)
        result = None
        if status == JobStatus.DONE and outcome.result_json is not None:
            result = json.loads(outcome.result_json)
        return RunRecord(
            job_id=job.id, task=job.task, queue=job.queue, attempt=outcome.attempt, status=status,
            result=result, error=outcome.error,
        )  # fmt: skip

    def any_due(self) -> bool:
        """Whether a job this runner has not run is due (held, and given back by close())."""
        job = self._claim()
        if job is not None:
            self.held.append((job.id, job.fence))
        return job is not None

    @staticmethod
    def _write(job: Job, outcome: Outcome) -> JobStatus | None:
        """The run's outcome in the row, by the same fenced statements a worker uses."""
        from ..models import Job as JobModel

        jobs = JobModel.objects
        if outcome.abandoned:
            return None
        if outcome.ok:
            if outcome.committed:  # an atomic task wrote DONE in its own transaction
                return JobStatus.DONE
            return jobs.complete_json(job.id, WORKER_ID, outcome.result_json or "null", fence=outcome.fence)
        if outcome.snoozed:
            return jobs.snooze_run(job.id, WORKER_ID, outcome.fence, outcome.snooze or 0.0)
        if outcome.snooze is not None:  # no rate-limit permit
            owned = jobs.snooze(WORKER_ID, [(job.id, outcome.fence, outcome.snooze)])
            return JobStatus.PENDING if owned else None
        return jobs.fail(
            job.id, WORKER_ID, outcome.error, backoff_seconds=outcome.backoff, permanent=outcome.permanent,
            fence=outcome.fence, error_class=outcome.error_class, discard=outcome.discard,
        )  # fmt: skip

    @staticmethod
    def _report(job: Job, outcome: Outcome, status: JobStatus | None) -> None:
        """The signals a worker sends after writing the outcome."""
        common: dict[str, Any] = {"job": job, "worker_id": WORKER_ID}
        if status == JobStatus.DONE:
            signals.send(
                signals.job_succeeded, **common, result=outcome.result_json, duration=outcome.duration
            )
        elif status == JobStatus.CANCELLED:
            signals.send(signals.job_cancelled, **common, reason=outcome.error)
        elif status == JobStatus.DEAD:
            signals.send(signals.job_dead, **common, error=outcome.error)
        elif status == JobStatus.PENDING and outcome.snoozed:
            signals.send(signals.job_snoozed, **common, delay=outcome.snooze)
        elif status == JobStatus.PENDING and outcome.unknown_task:
            signals.send(signals.job_task_unknown, **common, delay=outcome.snooze)
        elif status == JobStatus.PENDING and outcome.snooze is not None:
            signals.send(signals.job_rate_limited, **common, delay=outcome.snooze)
        elif status == JobStatus.PENDING:
            signals.send(signals.job_retried, **common, error=outcome.error, delay=outcome.backoff)


def queue_list(queue: str | None, queues: Sequence[str] | None) -> list[str] | None:
    if queue is not None and queues is not None:
        raise TypeError("pass queue or queues, not both")
    if queue is not None:
        return [queue]
    return None if queues is None else list(queues)


def run_jobs(
    queue: str | None = None,
    *,
    queues: Sequence[str] | None = None,
    until_empty: bool = True,
    retries: bool = True,
    max_runs: int = MAX_RUNS,
) -> JobsRun:
    """Run the due jobs (of ``queue`` or ``queues``, or every queue) in this thread, each through the
    worker's claim → run → fenced write, and return what happened. ``until_empty``: also the jobs that
    become due meanwhile (those the runs enqueue), until none is due; otherwise one run at most. Each
    job runs once per call: a failed run's retry is due after its backoff, for a later call (move the
    queue's clock to reach it: JOBQ["CLOCK"] = "python" with time-machine); ``retries=False`` sends
    it DEAD at once instead. JobsFailed past ``max_runs`` runs."""
    runner = JobRunner(queue_list(queue, queues), retries=retries)
    done = JobsRun()
    try:
        while (record := runner.run_next()) is not None:
            done.runs.append(record)
            if not until_empty:
                break
            if len(done.runs) >= max_runs and runner.any_due():
                raise JobsFailed(
                    f"jobs still due after {max_runs} runs: does a job keep enqueuing or snoozing itself?",
                    done,
                )
    finally:
        runner.close()
    return done


def drain(
    queue: str | None = None, *, queues: Sequence[str] | None = None, max_runs: int = MAX_RUNS
) -> JobsRun:
    """run_jobs() until none is due, then JobsFailed (an AssertionError naming each failure, with its
    traceback) if any run failed; a discarded or cancelled run is not a failure."""
    done = run_jobs(queue, queues=queues, max_runs=max_runs)
    if done.failed:
        details = "\n\n".join(
            f"job {r.job_id} ({r.task}) attempt {r.attempt} -> {r.status.label if r.status else '?'}:\n{r.error}"
            for r in done.failed
        )
        raise JobsFailed(f"{len(done.failed)} of {len(done)} run(s) failed:\n\n{details}", done)
    return done
