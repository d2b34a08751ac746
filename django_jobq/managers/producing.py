"""Producing jobs: enqueue and enqueue_many. Every value is checked before anything is written."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, NamedTuple

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..tasks import find_task, get_task
from .base import BaseJobManager


class NewJob(NamedTuple):
    """One job for enqueue_many (fields as for enqueue; None means the task's default)."""

    task: str
    payload: dict[str, Any] | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    max_attempts: int | None = None


class ProducerManager(BaseJobManager):
    @staticmethod
    def _payload(task: str, payload: Any) -> str:
        """The payload's JSON text, once it is checked to fit the registered task's signature."""
        text = validation.payload_json(payload, jobq_settings().max_payload_bytes)
        if registered := find_task(task):
            registered.check_call(payload or {})
        return text

    def _options(
        self, task: str, queue: str | None, priority: int | None, max_attempts: int | None
    ) -> tuple[str, str, int, int]:
        """(task, queue, priority, max_attempts), checked, with the registered task's defaults."""
        validation.name(task, "task")
        registered = find_task(task)
        if registered is None and jobq_settings().strict_tasks:
            get_task(task)  # raises UnknownTask with the name in the message
        if queue is None:
            queue = registered.queue if registered else "default"
        if priority is None:
            priority = registered.priority if registered else 100
        if max_attempts is None:
            max_attempts = (registered and registered.max_attempts) or jobq_settings().max_attempts
        return (
            task,
            validation.queue(queue),
            validation.priority(priority),
            validation.max_attempts(max_attempts),
        )

    def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
    ) -> int | None:
        """Insert a job in the caller's transaction; its id, or None when an active duplicate exists.

        queue/priority/max_attempts default to the registered task's, then "default"/100/JOBQ["MAX_ATTEMPTS"].
        """
        conf = jobq_settings()
        task, queue, priority, max_attempts = self._options(task, queue, priority, max_attempts)
        params: dict[str, Any] = {
            "task": task, "queue": queue, "priority": priority, "max_attempts": max_attempts,
            "payload": self._payload(task, payload),
        }  # fmt: skip
        params["run_at"] = None if run_at is None else validation.aware(run_at, "run_at")
        params["delay"] = 0.0 if delay is None else validation.seconds(delay, "delay")
        params["dedupe_key"] = validation.dedupe_key(dedupe_key)
        params["notify"], params["channel"] = conf.notify, conf.notify_channel
        rows = self._execute(self._sql().ENQUEUE, params)
        return rows[0][0] if rows else None

    def enqueue_many(self, jobs: Iterable[NewJob]) -> list[int]:
        """Insert many jobs in one statement; the ids of those inserted (duplicates are skipped).
        All or nothing: an invalid job raises (its message names its index) and nothing is written."""
        conf = jobq_settings()
        options: dict[tuple[Any, ...], tuple[str, str, int, int]] = {}  # most jobs share their options
        rows = []
        for index, job in enumerate(jobs):
            try:
                if not isinstance(job, NewJob):
                    raise InvalidJob(f"expected a NewJob, not {type(job).__name__}")
                key = (job.task, job.queue, job.priority, job.max_attempts)
                if key not in options:
                    options[key] = self._options(*key)
                rows.append((
                    *options[key],
                    self._payload(job.task, job.payload),
                    None if job.run_at is None else validation.aware(job.run_at, "run_at"),
                    validation.dedupe_key(job.dedupe_key),
                ))  # fmt: skip
            except InvalidJob as exc:
                raise type(exc)(f"job {index}: {exc}") from None
        if not rows:
            return []
        names = ("tasks", "queues", "priorities", "max_attempts", "payloads", "run_ats", "dedupe_keys")
        params: dict[str, Any] = dict(
            zip(names, (list(column) for column in zip(*rows, strict=True)), strict=True)
        )
        params.update(notify=conf.notify, channel=conf.notify_channel)
        return [row[0] for row in self._execute(self._sql().ENQUEUE_MANY, params)]
