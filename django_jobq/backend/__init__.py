"""django-jobq as a backend of Django's Tasks framework: ``TASKS = {"default": {"BACKEND":
"django_jobq.backend.JobqBackend"}}``. Layered one way: compat (Django's names, on 5.2 and 6.x) <-
results (TaskResults from job rows) <- runner (Django tasks run as jobq tasks) <- core (the backend)."""

from .core import (
    CALL_OPTIONS,
    OPTION_KEYS,
    InvalidJobqTask,
    JobqBackend,
    JobqTask,
    UnknownTaskOption,
    call_options,
    jobq_priority,
    option_problems,
    task,
)

__all__ = [
    "CALL_OPTIONS",
    "OPTION_KEYS",
    "InvalidJobqTask",
    "JobqBackend",
    "JobqTask",
    "UnknownTaskOption",
    "call_options",
    "jobq_priority",
    "option_problems",
    "task",
]
