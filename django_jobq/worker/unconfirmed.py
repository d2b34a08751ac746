"""Writes whose outcome a lane's dispatcher could not confirm at once: a success whose row another
transaction holds (written once it lets go), a write-and-claim statement whose reply was lost (the
successes written again, a row already ended re-read, jobs claimed unknowingly given back), and a batch
the database refused (each success written alone)."""

from __future__ import annotations

import functools
import logging

from django.db import Error as DatabaseError

from ..managers.written import Written
from ..models import Job
from ..status import JobStatus
from .classify import Outcome
from .failures import FailureMixin
from .lanes import Lane, Running

logger = logging.getLogger("django_jobq")


class UnconfirmedMixin(FailureMixin):
    def _complete_when_free(self, entry: Running, outcome: Outcome) -> None:
        """Write a success whose row another transaction held (lock_waits.py); the job stays held
        (leased, renewed) until it is written."""
        job = entry.job

        def write() -> JobStatus | None:
            result = outcome.result_json or "null"
            return Job.objects.complete_json(job.id, self.worker_id, result, fence=outcome.fence)

        def then(status: JobStatus | None) -> None:
            self._settled_others()  # before the job leaves _running: no lane sees the worker quiet between
            self._forget(entry)
            self._report_ended(entry, outcome, status)

        self.lock_waits.write(job.id, "complete", write, then, f"job {job.id}'s completion")

    def _resolve_unknown(
        self, lane: Lane, successes: list[tuple[Running, Outcome]], done: list[tuple[int, int, str]]
    ) -> Written:
        """The statement may have committed without our hearing of it: write the successes again (a row
        already ended is resolved by re-reading it) and give back jobs claimed unknowingly."""
        written = self._db(lambda: Job.objects.complete_many(self.worker_id, done)) or Written()
        settled = {
            r.job.id: state
            for r, o in successes
            if r.job.id not in written.ended | written.busy and (state := self._written_as(r, o)) is not None
        }

        def release() -> None:
            with self._batch_claims:  # never a batch's fresh claim, not yet recorded as running
                self._release_orphans(lane)

        self._db(release)
        return Written(
            done=written.done | {i for i, s in settled.items() if s == JobStatus.DONE},
            cancelled=written.cancelled | {i for i, s in settled.items() if s == JobStatus.CANCELLED},
            busy=written.busy,
            settled=True,  # not known: as if some had dependents
        )

    def _complete_one_by_one(self, successes: list[tuple[Running, Outcome]]) -> Written:
        """Write each success alone; one the database refuses goes DEAD with the reason."""
        parts: list[Written] = []
        for entry, outcome in successes:
            row = (entry.job.id, outcome.fence, outcome.result_json or "null")
            try:
                write = functools.partial(Job.objects.complete_many, self.worker_id, [row])
                parts.append(self._db(write) or Written())
            except DatabaseError as exc:
                error = f"the job's result could not be stored: {exc}"
                logger.error("job %s (%s): %s", entry.job.id, entry.job.task, error)
                self._fail_plainly(entry, outcome, error)
        return Written(
            done=frozenset().union(*(p.done for p in parts)),
            cancelled=frozenset().union(*(p.cancelled for p in parts)),
            busy=frozenset().union(*(p.busy for p in parts)),
            settled=True,
        )

    def _release_orphans(self, lane: Lane) -> None:
        with self._lock:
            known = [job_id for (job_id, _), r in self._running.items() if r.lane is lane]
        released = Job.objects.release_orphans(self.worker_id, lane.claims, known, exclude=lane.exclude)
        if released:
            logger.warning(
                "worker %s: released %d job(s) from a lost claim reply", self.worker_id, len(released)
            )

    def _written_as(self, entry: Running, outcome: Outcome) -> JobStatus | None:
        """Re-read a job whose completion went unconfirmed: the status our write left (DONE, or
        CANCELLED when a cancel was asked), None when the row does not show our write."""
        state = self._db(lambda: Job.objects.state(entry.job.id))
        if state is None or state[1:] != (self.worker_id, outcome.fence):
            return None
        return state[0] if state[0] in (JobStatus.DONE, JobStatus.CANCELLED) else None
