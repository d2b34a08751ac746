"""What a worker says about each outcome it wrote: the log line and the signal (which the metrics
count), from the status the database wrote, never from what the run returned."""

from __future__ import annotations

import logging

from .. import signals
from ..status import JobStatus
from .base import WorkerBase
from .classify import Outcome
from .lanes import Running

logger = logging.getLogger("django_jobq")


class ReportMixin(WorkerBase):
    def _report_failure(self, entry: Running, outcome: Outcome, status: JobStatus | None) -> None:
        job = entry.job
        if status is None:
            logger.warning("job %s: failure not recorded (no longer owned by %s)", job.id, self.worker_id)
            return
        extra = {"job_id": job.id, "task": job.task, "attempt": outcome.attempt, "duration": outcome.duration}
        if status == JobStatus.CANCELLED:
            logger.info("job %s (%s) is CANCELLED after attempt %s: %s", job.id, job.task, outcome.attempt,
                        (outcome.error or "?").splitlines()[-1], extra=extra)  # fmt: skip
            signals.send(signals.job_cancelled, job=job, worker_id=self.worker_id, reason=outcome.error)
        elif status == JobStatus.DEAD:
            logger.error("job %s (%s) is DEAD after attempt %s:\n%s", job.id, job.task, outcome.attempt,
                         outcome.error, extra=extra)  # fmt: skip
            signals.send(signals.job_dead, job=job, worker_id=self.worker_id, error=outcome.error)
        else:
            logger.warning("job %s (%s) attempt %s failed, retry scheduled: %s", job.id, job.task,
                           outcome.attempt, (outcome.error or "?").splitlines()[-1], extra=extra)  # fmt: skip
            signals.send(
                signals.job_retried,
                job=job,
                worker_id=self.worker_id,
                error=outcome.error,
                delay=outcome.backoff,
            )

    def _report_snooze(self, entry: Running, outcome: Outcome, status: JobStatus | None) -> None:
        job = entry.job
        if status is None:
            logger.warning("job %s: snooze not recorded (no longer owned by %s)", job.id, self.worker_id)
        elif status == JobStatus.CANCELLED:
            signals.send(signals.job_cancelled, job=job, worker_id=self.worker_id, reason="cancelled")
        else:
            logger.info("job %s (%s) snoozed for %.3gs", job.id, job.task, outcome.snooze,
                        extra={"job_id": job.id, "task": job.task})  # fmt: skip
            signals.send(signals.job_snoozed, job=job, worker_id=self.worker_id, delay=outcome.snooze)

    def _report_done(self, entry: Running, outcome: Outcome) -> None:
        job = entry.job
        if logger.isEnabledFor(logging.INFO):
            logger.info("job %s (%s) done in %.3fs (attempt %s)", job.id, job.task, outcome.duration,
                        outcome.attempt, extra={"job_id": job.id, "task": job.task, "attempt": outcome.attempt,
                                                "duration": outcome.duration})  # fmt: skip
        signals.send(
            signals.job_succeeded, job=job, worker_id=self.worker_id, result=outcome.result_json,
            duration=outcome.duration,
        )  # fmt: skip

    def _report_ended(self, entry: Running, outcome: Outcome, status: JobStatus | None) -> None:
        """A successful run's write: DONE, or CANCELLED (a cancel was asked while it ran, and reached the
        database before the worker heard of it: its result is discarded)."""
        if status == JobStatus.DONE:
            self._report_done(entry, outcome)
        elif status == JobStatus.CANCELLED:
            job = entry.job
            reason = "cancelled while it ran; its result was discarded"
            logger.info("job %s (%s) is CANCELLED after attempt %s: %s", job.id, job.task, outcome.attempt,
                        reason, extra={"job_id": job.id, "task": job.task, "attempt": outcome.attempt,
                                       "duration": outcome.duration})  # fmt: skip
            signals.send(signals.job_cancelled, job=job, worker_id=self.worker_id, reason=reason)
        else:
            logger.warning("job %s: result not recorded, the job is no longer ours", entry.job.id)

    def _report_unknown_task(self, entry: Running, outcome: Outcome) -> None:
        """A job given back because this worker knows no task of its name: a warning the first time
        for each name (a worker running older code than its producers), then at INFO."""
        job = entry.job
        with self._lock:
            first = job.task not in self._unknown_tasks
            self._unknown_tasks.add(job.task)
        logger.log(
            logging.WARNING if first else logging.INFO,
            "worker %s knows no task %r (job %s); given back for a worker that does, due in %.3gs (DEAD "
            'once it has waited JOBQ["UNKNOWN_TASK_GRACE"] since its enqueue)',
            self.worker_id, job.task, job.id, outcome.snooze,
        )  # fmt: skip
        signals.send(signals.job_task_unknown, job=job, worker_id=self.worker_id, delay=outcome.snooze)
