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
from collections.abc import Container

from django.db import Error as DatabaseError
from django.db import connections

from .. import signals
from ..conf import jobq_settings
from ..managers.written import Written
from ..models import Job
from ..registry import capped_tasks, resolve_task
from ..status import JobStatus
from .base import is_connection_error
from .classify import Outcome
from .failures import Report
from .lanes import Lane, Running
from .pausing import PauseMixin
from .rationing import RationMixin
from .seats import SeatMixin
from .unconfirmed import UnconfirmedMixin

logger = logging.getLogger("django_jobq")
GIVE_BACK_RETRY_SECONDS = 1.0  # a give-back the database did not take is tried again after this
# A lane whose claim came up short does not look past the jobs its task caps hold back again before
# this: looking reads every held-back job, so a deep backlog of a task at its cap would cost each
# cycle a read of it. Jobs of other tasks queued behind such a backlog wait at most this long more.
LOOK_PAST_SECONDS = 0.2
# A lane looks at most this often whether the job table has outgrown the plans of its connection's
# statements (Job.objects.replan_if_grown: a table that was small when they were planned is read whole).
REPLAN_CHECK_SECONDS = 5.0


class DispatchMixin(PauseMixin, RationMixin, SeatMixin, UnconfirmedMixin):
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
            or (
                self.burst
                and lane.idle
                and lane.next_permit() is None
                and not self._runs_capped()
                and self._quiet_since_claim(lane)
            )
        )

    def _quiet_since_claim(self, lane: Lane) -> bool:
        """Burst: nothing runs in this worker and none of its writes may have released jobs since this
        lane's last claim was sent (_settled_others: a completion of a job with dependents, a failure).
        A job released by the statement that claims is not in that claim's snapshot: a burst lane
        claims again after such a write, and ends only once every lane found nothing. Holds
        lane.cond."""
        with self._lock:
            return not self._running and not self._cycling and self._ended == lane.claimed_after

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
        None when the lane is finished. From the moment it returns work the lane counts as cycling,
        until _dispatch's cycle ends (_cycle_begins): a burst worker's other lanes do not end while its
        seat takes, give-backs and claim are still to come."""
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
                    return self._cycle_begins(lane)  # claimed ahead, never started: to give back now
                if lane.woken:
                    lane.idle = lane.woken = False
                    lane.dry.clear()
                permit_at = lane.next_permit()  # a rate-limited queue has a permit again then
                if lane.idle and (now >= poll_at or (permit_at is not None and now >= permit_at)):
                    lane.idle = False  # the safety-net poll
                if self.burst and lane.idle and not self._quiet_since_claim(lane):
                    with self._lock:
                        ended_since = self._ended != lane.claimed_after
                    lane.idle = not ended_since  # a write since may have released jobs: claim again
                room = lane.capacity(claim_ahead, now) - lane.busy
                can_claim = not stopping and self._budget() > 0 and (room > 0 or self._seats_due(lane, now))
                if lane.outcomes or (can_claim and not lane.idle):
                    return self._cycle_begins(lane)
                timeout = max(0.001, min(poll_at, permit_at or poll_at) - now) if lane.idle else 0.5
                if (seat_at := self._next_seat_take(lane, now)) is not None:  # seats to try for then
                    timeout = min(timeout, max(0.001, seat_at - now))
                if lane.unstarted:  # a give-back the database did not take: try again then
                    timeout = min(timeout, max(0.001, lane.give_back_at - now))
                if not lane.work.empty() and (long_in := lane.next_long_run(now)) is not None:
                    timeout = min(timeout, long_in + 0.001)  # then what waits behind it goes back
                lane.cond.wait(timeout=timeout)

    def _cycle_begins(self, lane: Lane) -> list[tuple[Running, Outcome]]:
        """The lane's outcomes to write, taken; the lane counts as cycling from here. Holds lane.cond."""
        outcomes, lane.outcomes = lane.outcomes, []
        with self._lock:
            self._cycling += 1
        return outcomes

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
                    self._take_seats(lane)  # of the capped queues: they bound the claim
                with lane.cond:  # a run that finished since this cycle's outcomes were taken is still
                    # RUNNING in the database until the next cycle writes it: it keeps its place
                    claim_ahead = jobq_settings().claim_ahead
                    room = lane.capacity(claim_ahead, time.monotonic()) - lane.busy - len(lane.outcomes)
                with self._lock:
                    free = 0 if self.stopping.is_set() or lane.paused else max(0, min(room, self._budget()))
                    self._claimed += free
                    lane.claimed_after = self._ended
                seated = self._seated(lane)  # the jobs each cap's seats leave room for
                # permits taken for the rate-limited queues (and tasks: no more than their seats')
                rations = self._rations(lane, free, self._seated_caps(lane, seated)[1])
                asked = self._asked(lane, free, rations)
                successes = [(r, o) for r, o in outcomes if o.ok]
                self._replan_if_grown(lane)
                jobs, done, sent = self._cycle(lane, successes, asked, rations, seated)
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
                self._settle_rations(lane, rations, jobs, asked)  # after: the jobs carry this claim's permits
                self._free_spare_seats(lane, seated, jobs, asked)
                with self._lock:
                    self._cycling -= 1
                for report in (*reports, *done):  # after the hand-out: a receiver never delays a job
                    report()
        finally:
            lane.done.set()

    def _replan_if_grown(self, lane: Lane) -> None:
        """At most every REPLAN_CHECK_SECONDS, before a cycle's statement: the lane's connection plans
        its statements again if the job table has outgrown their plans. Nothing is written here: a
        failure is logged, and the cycle's own statement meets the database as it is."""
        now = time.monotonic()
        if now < lane.replan_check_at:
            return
        lane.replan_check_at = now + REPLAN_CHECK_SECONDS
        try:
            Job.objects.replan_if_grown()
        except DatabaseError as exc:
            if is_connection_error(exc):  # the cycle's statement meets it too, and reports the outage
                connections[jobq_settings().database].close()
                return
            logger.warning("worker %s lane %s: could not compare the job table's size with its plans (%s)",
                           self.worker_id, lane.queue, exc)  # fmt: skip

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
        self, lane: Lane, successes: list[tuple[Running, Outcome]], limit: int, rations: dict[str, int],
        seated: dict[str, int],
    ) -> tuple[list[Job], list[Report], float]:  # fmt: skip
        """Write the successes and claim up to ``limit`` jobs (none from the lane's held queues, no more
        of a rate-limited queue than its ``rations``, of a capped queue or task than its ``seated``, by
        pool), in one statement; none when there is nothing to write or claim (a paused lane's wake-up).
        Also returns the monotonic time the statement was sent: the claimed leases run at least that
        long."""
        lease = jobq_settings().lease_seconds
        sent = time.monotonic()
        to_write = [(r, o) for r, o in successes if not o.committed]  # atomic tasks wrote their own DONE
        done = [(r.job.id, o.fence, o.result_json or "null") for r, o in to_write]
        exclude = lane.exclude if lane.claims is not None else (*lane.exclude, *lane.held)
        seated_queues, seated_tasks = self._seated_caps(lane, seated)
        written = Written()
        jobs: list[Job] = []
        try:
            if done or limit:
                Job.objects.bound_statements()
                sent = time.monotonic()  # the claimed leases run for at least LEASE_SECONDS from here
                look_past = sent >= lane.look_past_at
                written, jobs = Job.objects.complete_and_claim(
                    self.worker_id, done, limit, lane.claims, lease, exclude=exclude, look_past=look_past,
                    rations=rations, task_rations=lane.task_rations, seated=seated_queues,
                    seated_tasks=seated_tasks,
                )  # fmt: skip
                if look_past and len(jobs) < limit:  # nothing (more) behind the held-back jobs
                    lane.look_past_at = sent + LOOK_PAST_SECONDS
                self.outage.ok()
        except DatabaseError as exc:
            connections[jobq_settings().database].close()
            jobs = []
            if is_connection_error(exc):
                self.outage.failed(f"lane {lane.queue}'s write and claim", exc)
                written = self._resolve_unknown(lane, to_write, done)
            else:  # the database refused the batch: one value in it must be bad
                logger.error("worker %s lane %s: batch refused (%s); writing one by one", self.worker_id,
                             lane.queue, exc)  # fmt: skip
                written = self._complete_one_by_one(to_write)
        done_ids = written.done | {r.job.id for r, o in successes if o.committed}
        if written.settled or any(o.committed for _, o in successes):  # an atomic task's own DONE too
            self._settled_others()
        reports: list[Report] = []
        for entry, outcome in successes:
            job_id = entry.job.id
            if job_id in written.busy:  # another transaction holds its row: written once it lets go
                self._complete_when_free(entry, outcome)
                continue
            self._forget(entry)
            status = (
                JobStatus.DONE if job_id in done_ids else JobStatus.CANCELLED if job_id in written.cancelled
                else None
            )  # fmt: skip
            reports.append(functools.partial(self._report_ended, entry, outcome, status))
        return jobs, reports, sent

    def _hand_out(
        self, lane: Lane, jobs: list[Job], claimed_at: float, permitted: Container[str] = ()
    ) -> None:
        """Give the claimed jobs to the slots (``permitted``: queues claimed with rate-limit permits;
        the lane's task_rations: tasks)."""
        if jobs and self.abandon.is_set():  # the shutdown's release may have run already
            released = self._db(lambda: Job.objects.release(self.worker_id), attempts=3) or []
            logger.warning(
                "worker %s: released %d job(s) claimed during shutdown", self.worker_id, len(released)
            )
            self._return_claim_permits(lane, jobs, permitted)  # none of them starts
            return
        default_timeout = jobq_settings().job_timeout
        jobs.sort(key=lambda job: (job.priority, job.run_at, job.id))  # slots take them in claim order
        entries, limited = [], []
        for job in jobs:
            task = resolve_task(job.task)
            timeout = (task.timeout if task else None) or default_timeout
            queue_permit, task_permit = self._permits(lane, job, permitted)
            entry = Running(
                job, job.fence, job.attempts, lane, timeout, renewed_at=claimed_at, permitted=queue_permit,
                task_permitted=task_permit,
            )  # fmt: skip
            with self._lock:  # from here the heartbeat renews its lease
                self._running[entry.key] = entry
            with lane.cond:
                lane.busy += 1
            entries.append(entry)
            if task is not None and task.rate_limit is not None and not task_permit:
                limited.append(entry)
        if limited:  # a statement: after the jobs are in _running
            self._take_unrationed_permits(lane, limited)
        self._handed_seated(lane, entries)
        for entry in entries:
            lane.work.put(entry)

    def _give_back_unstarted(self, lane: Lane) -> None:
        """Claimed-ahead jobs no slot has started go back to PENDING at once, in their place, without
        using up an attempt: all of them when stopping; otherwise those set aside by a slot (their lease
        may have run out) and the surplus waiting behind long runs (Lane.surplus), newest first. Left
        RUNNING if the statement fails: the lease, or the shutdown's release, takes them."""
        stopping = self.stopping.is_set()
        parked = self._unpark(lane, stopping)  # parked for a capped queue's seat (worker/seats.py)
        with lane.cond:
            entries, lane.unstarted = [*parked, *lane.unstarted], []
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
            self._left_waiting(lane, waiting[len(keep) :])
            entries += waiting[len(keep) :]
        if not entries:
            return
        runs = [(entry.job.id, entry.fence) for entry in entries]
        try:
            released = self._db(lambda: Job.objects.release_unstarted(self.worker_id, runs), attempts=3)
        except DatabaseError as exc:  # refused (e.g. a row held past LOCK_TIMEOUT): kept, tried again
            released = None
            logger.error("worker %s: could not give back claimed-ahead jobs (%s); trying again in %.0fs",
                         self.worker_id, exc, GIVE_BACK_RETRY_SECONDS)  # fmt: skip
        if released is None:  # the database is away: they stay ours (leased, renewed, never started)
            with lane.cond:  # and go back once it answers again (the shutdown's release, at the latest)
                lane.unstarted = entries + lane.unstarted
                lane.give_back_at = time.monotonic() + GIVE_BACK_RETRY_SECONDS
            return
        given_back = set(released)
        self._return_permits(e for e in entries if e.job.id in given_back)
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
