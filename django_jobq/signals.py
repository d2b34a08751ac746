"""Signals sent by the worker; every one carries ``job`` (the Job as claimed) and ``worker_id``."""

from django.dispatch import Signal

job_started = Signal()  # before the task function runs
job_succeeded = Signal()  # after DONE was written; also ``result`` and ``duration``
job_retried = Signal()  # after the job went back to PENDING; also ``error`` and ``delay``
job_dead = Signal()  # after the job went DEAD; also ``error``
