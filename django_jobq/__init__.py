"""django-jobq: a PostgreSQL job queue for Django."""

from .backoff import RetryPolicy, compute_backoff
from .exceptions import (
    ConfigurationError,
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
    UnknownTask,
    WaitTimeout,
)
from .tasks import Task, task

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
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
    "Task",
    "UnknownTask",
    "WaitTimeout",
    "compute_backoff",
    "task",
]
