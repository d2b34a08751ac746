"""django-jobq: a PostgreSQL job queue for Django."""

from .backoff import RetryPolicy, compute_backoff
from .exceptions import (
    ConfigurationError,
    InvalidJob,
    InvalidPayload,
    JobqError,
    JobTimeout,
    PayloadMismatch,
    PayloadTooLarge,
    PermanentError,
    RateLimitUnavailable,
    UnknownTask,
)
from .tasks import Task, task

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "InvalidJob",
    "InvalidPayload",
    "JobTimeout",
    "JobqError",
    "PayloadMismatch",
    "PayloadTooLarge",
    "PermanentError",
    "RateLimitUnavailable",
    "RetryPolicy",
    "Task",
    "UnknownTask",
    "compute_backoff",
    "task",
]
