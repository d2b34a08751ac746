"""Writing the outcomes of runs that did not succeed: failures (retry, DEAD, CANCELLED), snoozes,
rate-limit refusals and jobs of tasks the worker does not know, each one fenced statement."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.db import Error as DatabaseError

from .. import signals
from ..models import Job
from ..status import JobStatus
from .classify import Outcome
from .lanes import Running
from .reports import ReportMixin

logger = logging.getLogger("django_jobq")
Report = Callable[[], None]  # logs and signals about an outcome, sent once the lane's jobs are handed out


class FailureMixin(ReportMixin):
    def _write_failure(self, entry: Running, outcome: Outcome) -> Report:
        job = entry.job
        if outcome.snoozed:  # the task raised Snooze: the job waits, no attempt used
            delay = outcome.snooze or 0.0
            try:
                status = self._db(
                    lambda: Job.objects.snooze_run(job.id, self.worker_id, outcome.fence, delay)
                )
            except DatabaseError as exc:  # left to its lease
                logger.error("job %s: could not snooze it (%s)", job.id, exc)
                status = None
            self._forget(entry, ended=status == JobStatus.CANCELLED)
            return functools.partial(self._report_snooze, entry, outcome, status)
        if outcome.unknown_task:  # a task this worker does not know: back for one that does
            runs = [(job.id, outcome.fence, outcome.snooze or 0.0)]
            try:
                self._db(lambda: Job.objects.snooze(self.worker_id, runs))
            except DatabaseError as exc:  # left to its lease
                logger.error("job %s: could not give it back (%s)", job.id, exc)
            self._forget(entry, ended=False)
            return functools.partial(self._report_unknown_task, entry, outcome)
        if outcome.snooze is not None:  # no rate-limit permit: the job waits, no attempt used
            runs = [(job.id, outcome.fence, outcome.snooze)]
            try:
                self._db(lambda: Job.objects.snooze(self.worker_id, runs))
            except DatabaseError as exc:  # left to its lease
                logger.error("job %s: could not put it back to wait for a permit (%s)", job.id, exc)
            self._forget(entry, ended=False)
            return functools.partial(
                signals.send,
                signals.job_rate_limited,
                job=job,
                worker_id=self.worker_id,
                delay=outcome.snooze,
            )
        try:
            status = self._db(
                lambda: Job.objects.fail(
                    job.id, self.worker_id, outcome.error, backoff_seconds=outcome.backoff,
                    permanent=outcome.permanent, fence=outcome.fence, error_class=outcome.error_class,
                    discard=outcome.discard,
                )
            )  # fmt: skip
        except DatabaseError as exc:  # its error text was refused: never retry the same write
            status = self._fail_plainly(
                entry, outcome, f"the job failed; its error could not be stored: {exc}"
            )
        self._settled_others()  # a job ended DEAD or CANCELLED settles its dependents (before _forget)
        self._forget(entry)
        return functools.partial(self._report_failure, entry, outcome, status)

    def _fail_plainly(self, entry: Running, outcome: Outcome, error: str) -> JobStatus | None:
        """Send the run DEAD with a short, always storable error (when its own result or error was refused)."""
        try:
            return self._db(
                lambda: Job.objects.fail(
                    entry.job.id, self.worker_id, error, permanent=True, fence=outcome.fence
                )
            )
        except DatabaseError as exc:
            logger.error("job %s: could not record its failure (%s)", entry.job.id, exc)
            return None
