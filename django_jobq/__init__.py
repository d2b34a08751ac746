"""django-jobq: a PostgreSQL job queue for Django."""

from .backoff import RetryPolicy, compute_backoff
from .batches import Batch, BatchJob
from .exceptions import (
    ArgumentsNotJSON,
    BatchAnswerInvalid,
    BatchAnswerMissing,
    ConfigurationError,
    DedupeKeyConflict,
    DependencyFailed,
    DependencyNotFound,
    ForeignTransaction,
    InvalidJob,
    InvalidPayload,
    JobFailed,
    JobqError,
    JobTimeout,
    PayloadMismatch,
    PayloadTooLarge,
    PermanentError,
    QueueFull,
    RateLimitUnavailable,
    SpansDatabases,
    UnknownShard,
    UnknownTask,
    WaitTimeout,
    WorkerLost,
    WorkflowTooLarge,
)
from .outcomes import Cancelled, Discard, Snooze
from .status import CancelCounts, CancelOutcome
from .tasks import Task, task

__version__ = "0.1.0"

__all__ = [
    "ArgumentsNotJSON",
    "Batch",
    "BatchAnswerInvalid",
    "BatchAnswerMissing",
    "BatchJob",
    "CancelCounts",
    "CancelOutcome",
    "Cancelled",
    "ConfigurationError",
    "DedupeKeyConflict",
    "DependencyFailed",
    "DependencyNotFound",
    "Discard",
    "ForeignTransaction",
    "InvalidJob",
    "InvalidPayload",
    "JobFailed",
    "JobTimeout",
    "JobqError",
    "PayloadMismatch",
    "PayloadTooLarge",
    "PermanentError",
    "QueueFull",
    "RateLimitUnavailable",
    "RetryPolicy",
    "Snooze",
    "SpansDatabases",
    "Task",
    "UnknownShard",
    "UnknownTask",
    "WaitTimeout",
    "WorkerLost",
    "WorkflowTooLarge",
    "compute_backoff",
    "task",
]
