"""A lane's dispatcher: writes the lane's finished jobs and claims as many new ones as the lane has
room for (none from a paused queue, no more of a rate-limited one than the permits it took: see
rationing.py), in one statement per cycle; hands the claimed jobs to the slots;
reports outcomes. While the lane's runs are short it claims ahead (JOBQ["CLAIM_AHEAD"] per slot), so
the next cycle's round trip overlaps the slots' work; a stopping worker gives those back at once."""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections.abc import Callable, Container

from django.db import Error as DatabaseError
from django.db import connections

from .. import signals
from ..conf import jobq_settings
from ..models import Job
from ..registry import capped_tasks, resolve_task
from ..status import JobStatus
from .base import is_connection_error
from .lanes import Lane, Running
from .pausing import PauseMixin
from .rationing import RationMixin
from .runner import Outcome

logger = logging.getLogger("django_jobq")
GIVE_BACK_RETRY_SECONDS = 1.0  # a give-back the database did not take is tried again after this
# A lane whose claim came up short does not look past the jobs its task caps hold back again before
# this: looking reads every held-back job, so a deep backlog of a task at its cap would cost each
# cycle a read of it. Jobs of other tasks queued behind such a backlog wait at most this long more.
LOOK_PAST_SECONDS = 0.2
Report = Callable[[], None]  # logs and signals about an outcome, sent once the lane's jobs are handed out


class DispatchMixin(PauseMixin, RationMixin):
    def _budget(self) -> int:
        """Jobs this worker may still claim (max_jobs)."""
        return 1 << 30 if self.max_jobs is None else self.max_jobs - self._claimed

    def _lane_finished(self, lane: Lane) -> bool:
        """Nothing runs or waits to be written, and nothing more will be claimed. Holds lane.cond."""
        if lane.busy or lane.outcomes:
            return False
        return (
            self.stopping.is_set()
            or self._budget() <= 0
            or (self.burst and lane.idle and not lane.permit_at and not self._runs_capped())
        )

    def _runs_capped(self) -> bool:
        """A job of a capped task runs in this worker: a burst lane whose claim that task's cap held
        back waits for it to end (its room may be this lane's next job). Takes the worker's lock."""
        capped = capped_tasks()
        if not capped:
            return False
        with self._lock:
            return any(entry.job.task in capped for entry in self._running.values())

    def _wait_for_work(self, lane: Lane) -> list[tuple[Running, Outcome]] | None:
        """Block until there are outcomes to write, slots to fill or claimed-ahead jobs to give back;
        None when the lane is finished."""
        poll_at = time.monotonic() + self.poll_interval
        claim_ahead = jobq_settings().claim_ahead
        with lane.cond:
            while True:
                now = time.monotonic()
                if self.abandon.is_set() or self._lane_finished(lane):
                    return None
                stopping = self.stopping.is_set()
                give_back = lane.unstarted and now >= lane.give_back_at
                if give_back or (stopping and not lane.work.empty()) or lane.surplus(claim_ahead, now):
                    outcomes, lane.outcomes = lane.outcomes, []
                    return outcomes  # claimed ahead, never started: to give back now
                if lane.woken:
                    lane.idle = lane.woken = False
                    lane.dry.clear()
                permit_at = lane.next_permit()  # a rate-limited queue has a permit again then
                if lane.idle and (now >= poll_at or (permit_at is not None and now >= permit_at)):
                    lane.idle = False  # the safety-net poll
                room = lane.capacity(claim_ahead, now) - lane.busy
                can_claim = not stopping and self._budget() > 0 and room > 0
                if lane.outcomes or (can_claim and not lane.idle):
                    outcomes, lane.outcomes = lane.outcomes, []
                    return outcomes
                timeout = max(0.001, min(poll_at, permit_at or poll_at) - now) if lane.idle else 0.5
                if lane.unstarted:  # a give-back the database did not take: try again then
                    timeout = min(timeout, max(0.001, lane.give_back_at - now))
                if not lane.work.empty() and (long_in := lane.next_long_run(now)) is not None:
                    timeout = min(timeout, long_in + 0.001)  # then what waits behind it goes back
                lane.cond.wait(timeout=timeout)

    def _dispatch(self, lane: Lane) -> None:
        try:
            while (outcomes := self._wait_for_work(lane)) is not None:
                with self._lock:
                    for entry, _ in outcomes:
                        entry.writing = True
                reports = [self._write_failure(r, o) for r, o in outcomes if not o.ok]
                self._give_back_unstarted(lane)
                if not self.stopping.is_set():
                    self._held(lane)  # the paused queues this cycle leaves out
                with lane.cond:  # a run that finished since this cycle's outcomes were taken is still
                    # RUNNING in the database until the next cycle writes it: it keeps its place
                    claim_ahead = jobq_settings().claim_ahead
                    room = lane.capacity(claim_ahead, time.monotonic()) - lane.busy - len(lane.outcomes)
                with self._lock:
                    free = 0 if self.stopping.is_set() or lane.paused else max(0, min(room, self._budget()))
                    self._claimed += free
                rations = self._rations(lane, free)  # permits taken for the rate-limited queues
                asked = self._asked(lane, free, rations)
                jobs, done, sent = self._cycle(lane, [(r, o) for r, o in outcomes if o.ok], asked, rations)
                self._settle_rations(lane, rations, jobs)
                if asked:
                    signals.send(signals.jobs_claimed, worker_id=self.worker_id, lane=lane.queue, asked=asked,
                                 claimed=len(jobs))  # fmt: skip
                if self.burst and len(self.lanes) > 1 and outcomes and self._wrote_capped(outcomes):
                    self._wake_others(lane)  # room under a cap (this lane's claim just took its share)
                with self._lock:
                    self._claimed -= free - len(jobs)
                starved = asked > 0 and len(jobs) < asked
                with lane.cond:  # a paused lane waits for a wake-up or the poll, as one that found nothing;
                    # one whose permits ran out, for them (Lane.permit_at)
                    lane.idle = lane.paused or starved or (free > 0 and not asked)
                    if asked and not starved:  # a full claim: what a cycle takes under load
                        lane.cycled(time.monotonic() - sent)
                if self.idle_lock is not None:  # producers notify while a lane may wait for work
                    self.idle_lock.report(lane.queue, starved)
                self._hand_out(lane, jobs, sent, rations)
                for report in (*reports, *done):  # after the hand-out: a receiver never delays a job
                    report()
        finally:
            lane.done.set()

    def _wake_others(self, lane: Lane) -> None:
        """A burst lane whose claim a cap held back claims again now, not at the poll."""
        for other in self.lanes.values():
            if other is not lane:
                with other.cond:
                    other.woken = True
                    other.cond.notify_all()

    @staticmethod
    def _wrote_capped(outcomes: list[tuple[Running, Outcome]]) -> bool:
        capped = capped_tasks()
        return bool(capped) and any(entry.job.task in capped for entry, _ in outcomes)

    def _cycle(
        self, lane: Lane, successes: list[tuple[Running, Outcome]], limit: int, rations: dict[str, int]
    ) -> tuple[list[Job], list[Report], float]:
        """Write the successes and claim up to ``limit`` jobs (none from the lane's held queues, no more
        of a rate-limited queue than its ``rations``), in one statement; none when there is nothing to
        write or claim (a paused lane's wake-up). Also returns the monotonic time the statement was
        sent: the claimed jobs' leases run at least that long."""
        lease = jobq_settings().lease_seconds
        sent = time.monotonic()
        to_write = [(r, o) for r, o in successes if not o.committed]  # atomic tasks wrote their own DONE
        done = [(r.job.id, o.fence, o.result_json or "null") for r, o in to_write]
        exclude = lane.exclude if lane.claims is not None else (*lane.exclude, *lane.held)
        completed: set[int] = set()
        jobs: list[Job] = []
        try:
            if done or limit:
                Job.objects.bound_statements()
                sent = time.monotonic()  # the claimed leases run for at least LEASE_SECONDS from here
                look_past = sent >= lane.look_past_at
                completed, jobs = Job.objects.complete_and_claim(
                    self.worker_id, done, limit, lane.claims, lease, exclude=exclude, look_past=look_past,
                    rations=rations,
                )  # fmt: skip
                if look_past and len(jobs) < limit:  # nothing (more) behind the held-back jobs
                    lane.look_past_at = sent + LOOK_PAST_SECONDS
                self.outage.ok()
        except DatabaseError as exc:
            connections[jobq_settings().database].close()
            jobs = []
            if is_connection_error(exc):
                self.outage.failed(f"lane {lane.queue}'s write and claim", exc)
                completed = self._resolve_unknown(lane, to_write, done)
            else:  # the database refused the batch: one value in it must be bad
                logger.error("worker %s lane %s: batch refused (%s); writing one by one", self.worker_id,
                             lane.queue, exc)  # fmt: skip
                completed = self._complete_one_by_one(to_write)
        completed |= {r.job.id for r, o in successes if o.committed}
        reports: list[Report] = []
        for entry, outcome in successes:
            self._forget(entry)
            if entry.job.id in completed:
                reports.append(functools.partial(self._report_done, entry, outcome))
            else:
                logger.warning("job %s: result not recorded, the job is no longer ours", entry.job.id)
        return jobs, reports, sent

    def _resolve_unknown(
        self, lane: Lane, successes: list[tuple[Running, Outcome]], done: list[tuple[int, int, str]]
    ) -> set[int]:
        """The statement may have committed without our hearing of it: write the successes again (a row
        already DONE is resolved by re-reading it) and give back jobs claimed unknowingly."""
        completed = self._db(lambda: Job.objects.complete_many(self.worker_id, done)) or set()
        completed |= {r.job.id for r, o in successes if r.job.id not in completed and self._was_written(r, o)}
        self._db(lambda: self._release_orphans(lane))
        return completed

    def _complete_one_by_one(self, successes: list[tuple[Running, Outcome]]) -> set[int]:
        """Write each success alone; one the database refuses goes DEAD with the reason."""
        completed: set[int] = set()
        for entry, outcome in successes:
            row = (entry.job.id, outcome.fence, outcome.result_json or "null")
            try:
                write = functools.partial(Job.objects.complete_many, self.worker_id, [row])
                completed |= self._db(write) or set()
            except DatabaseError as exc:
                error = f"the job's result could not be stored: {exc}"
                logger.error("job %s (%s): %s", entry.job.id, entry.job.task, error)
                self._fail_plainly(entry, outcome, error)
        return completed

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

    def _hand_out(
        self, lane: Lane, jobs: list[Job], claimed_at: float, permitted: Container[str] = ()
    ) -> None:
        """Give the claimed jobs to the slots (``permitted``: queues claimed with rate-limit permits)."""
        if jobs and self.abandon.is_set():  # the shutdown's release may have run already
            released = self._db(lambda: Job.objects.release(self.worker_id), attempts=3) or []
            logger.warning(
                "worker %s: released %d job(s) claimed during shutdown", self.worker_id, len(released)
            )
            self._return_permits(job.queue for job in jobs if job.queue in permitted)  # none of them starts
            return
        default_timeout = jobq_settings().job_timeout
        jobs.sort(key=lambda job: (job.priority, job.run_at, job.id))  # slots take them in claim order
        for job in jobs:
            task = resolve_task(job.task)
            timeout = (task.timeout if task else None) or default_timeout
            entry = Running(
                job, job.fence, job.attempts, lane, timeout, renewed_at=claimed_at, permitted=job.queue in permitted
            )  # fmt: skip
            with self._lock:
                self._running[entry.key] = entry
            with lane.cond:
                lane.busy += 1
            lane.work.put(entry)

    def _give_back_unstarted(self, lane: Lane) -> None:
        """Claimed-ahead jobs no slot has started go back to PENDING at once, in their place, without
        using up an attempt: all of them when stopping; otherwise those set aside by a slot (their lease
        may have run out) and the surplus waiting behind long runs (Lane.surplus), newest first. Left
        RUNNING if the statement fails: the lease, or the shutdown's release, takes them."""
        stopping = self.stopping.is_set()
        with lane.cond:
            entries, lane.unstarted = lane.unstarted, []
            surplus = lane.surplus(jobq_settings().claim_ahead, time.monotonic())
        if stopping or surplus:
            waiting: list[Running] = []
            while True:
                try:
                    entry = lane.work.get_nowait()
                except queue.Empty:
                    break
                if entry is None:  # a slot's stop sentinel: not ours to take
                    lane.work.put(None)
                    break
                waiting.append(entry)
            keep = [] if stopping else waiting[: max(0, len(waiting) - surplus)]
            for entry in keep:  # the oldest claims stay, in order, for the slots
                lane.work.put(entry)
            entries += waiting[len(keep) :]
        if not entries:
            return
        runs = [(entry.job.id, entry.fence) for entry in entries]
        try:
            released = self._db(lambda: Job.objects.release_unstarted(self.worker_id, runs), attempts=3)
        except DatabaseError as exc:  # refused: the runs are left to their leases
            released = []
            logger.error("worker %s: could not give back claimed-ahead jobs (%s)", self.worker_id, exc)
        if released is None:  # the database is away: they stay ours (leased, renewed, never started)
            with lane.cond:  # and go back once it answers again (the shutdown's release, at the latest)
                lane.unstarted = entries + lane.unstarted
                lane.give_back_at = time.monotonic() + GIVE_BACK_RETRY_SECONDS
            return
        given_back = set(released)
        self._return_permits(e.job.queue for e in entries if e.permitted and e.job.id in given_back)
        with self._lock:
            for entry in entries:
                if self._running.get(entry.key) is entry:
                    del self._running[entry.key]
        with lane.cond:
            lane.busy -= len(entries)
            lane.cond.notify_all()
        if released:
            logger.info("worker %s: gave back %d job(s) claimed ahead and never started: %s",
                        self.worker_id, len(released), released)  # fmt: skip

    def _release_orphans(self, lane: Lane) -> None:
        with self._lock:
            known = [job_id for (job_id, _), r in self._running.items() if r.lane is lane]
        released = Job.objects.release_orphans(self.worker_id, lane.claims, known, exclude=lane.exclude)
        if released:
            logger.warning(
                "worker %s: released %d job(s) from a lost claim reply", self.worker_id, len(released)
            )

    def _was_written(self, entry: Running, outcome: Outcome) -> bool:
        """Re-read a job whose DONE write went unconfirmed: True if the row shows our write."""
        state = self._db(lambda: Job.objects.state(entry.job.id))
        return state == (JobStatus.DONE, self.worker_id, outcome.fence)

    # -- outcomes --------------------------------------------------------------------------------------
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
        self._forget(entry)
        return functools.partial(self._report_failure, entry, outcome, status)

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
