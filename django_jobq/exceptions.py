"""Every error django-jobq raises on purpose derives from JobqError."""

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured


class JobqError(Exception):
    """Root of django-jobq's exceptions."""


class InvalidJob(JobqError, ValueError):
    """An argument of enqueue (or a task option) is out of range; nothing was written."""


class InvalidPayload(InvalidJob):
    """The payload is not a JSON object, or does not serialise to strict JSON."""


class PayloadTooLarge(InvalidPayload):
    """The serialised payload exceeds JOBQ["MAX_PAYLOAD_BYTES"]."""


class PayloadMismatch(InvalidPayload):
    """The payload does not fit the task function's signature (refused at enqueue; DEAD at once when
    a worker meets such a row)."""


class UnknownTask(InvalidJob):
    """No task is registered under this name (and JOBQ["STRICT_TASKS"] is on)."""


class BatchAnswerMissing(JobqError):
    """A batch task's answer named no outcome for one of its jobs (django_jobq.batches): that job fails."""


class BatchAnswerInvalid(JobqError):
    """A batch task returned something other than None or a mapping of job id to outcome: every job
    of the call fails."""


class BadSelection(InvalidJob):
    """A console filter (a query string) a bulk action cannot rebuild exactly; nothing was done."""


class DependencyNotFound(InvalidJob):
    """depends_on names a job that does not exist in the queue's database; nothing was written."""


class DependencyFailed(InvalidJob):
    """depends_on names a job already DEAD or CANCELLED, for a job that would be cancelled by that;
    nothing was written."""


class WorkflowTooLarge(InvalidJob):
    """A workflow or a job's dependencies exceed a documented limit (docs/guide/workflows.md); nothing
    was written."""


class PermanentError(JobqError):
    """Raised by a task to send its job to DEAD at once, without further retries."""


class JobTimeout(JobqError):
    """A job ran past its timeout; it is failed like any transient error."""


class RateLimitUnavailable(JobqError):
    """The rate-limit store (the database) could not be reached, so no permit was decided."""


class SeatsUnavailable(JobqError):
    """A database that holds a cap's seats (the home database, for a spread queue's or a task's) did
    not answer a worker of another database; ``databases`` names each such database (``database``,
    the first), ``partial`` holds what the databases that did answer did (the call's own answer)."""

    def __init__(self, message: str, databases: Sequence[str]) -> None:
        super().__init__(message)
        self.databases = frozenset(databases)
        self.database = databases[0]
        self.partial: Any = None


class ConfigurationError(JobqError, ImproperlyConfigured):
    """The JOBQ setting or a command option is invalid."""


class WaitTimeout(JobqError, TimeoutError):
    """wait_for() or run_once() reached its timeout before the job finished."""


class JobFailed(JobqError):
    """run_once(): the job went DEAD; ``job`` is the row, ``error`` its last error."""

    def __init__(self, job: Any) -> None:
        self.job = job
        self.error: str | None = job.last_error
        lines = (job.last_error or "").strip().splitlines() or ["no error recorded"]
        super().__init__(f"job {job.id} ({job.task}) failed: {lines[-1]}")


class UnknownShard(JobqError):
    """A job id whose shard number names no database of JOBQ["SHARDS"]."""


class SpansDatabases(JobqError):
    """One write that would put jobs on more than one database (they could not commit together)."""


class PartlyWritten(JobqError):
    """enqueue_many over several databases: one refused its jobs after others had committed theirs
    (``ids``: the jobs written)."""

    def __init__(self, message: str, *, ids: list[int]) -> None:
        super().__init__(message)
        self.ids = ids


class ForeignTransaction(JobqError):
    """An enqueue to a queue on another database inside a transaction that could not include it."""


class QueueFull(JobqError):
    """The queue holds JOBQ["QUEUES"][queue]["MAX_DEPTH"] PENDING or RUNNING jobs already; nothing was written."""


class DedupeKeyConflict(JobqError):
    """The dedupe key is held by another task's job, which never answers this call; nothing was written."""

    def __init__(self, key: str, task: str, holder_id: int, holder_task: str) -> None:
        self.key, self.task, self.holder_id, self.holder_task = key, task, holder_id, holder_task
        super().__init__(
            f"dedupe key {key!r:.100} is held by job {holder_id} of task {holder_task!r:.200}, not "
            f"{task!r:.200}: nothing was written (give each task its own keys, e.g. prefixed by its name)"
        )


class ArgumentsNotJSON(InvalidPayload, TypeError):
    """A django.tasks task's arguments do not serialise to JSON (a TypeError, as Django's backends raise)."""


class WorkerLost(JobqError):
    """An attempt ended without an exception: its worker stopped renewing the lease, or released the job."""
