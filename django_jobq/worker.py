"""The worker: lanes of slots, each fed by one dispatcher thread that writes the lane's finished jobs
and claims as many new ones as there are free slots in a single statement; a heartbeat that renews
every lease in one statement; LISTEN wake-ups; a graceful drain.

Threads: one dispatcher and N slot threads per lane, one heartbeat, one listener (and optionally an
embedded reaper). Each uses its own database connection.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import Error as DatabaseError
from django.db import connections

from . import signals, validation
from .conf import jobq_settings
from .exceptions import ConfigurationError, JobTimeout
from .listener import Listener
from .models import Job, JobStatus
from .runner import Outcome, SlotRunner, format_error
from .tasks import Task, find_task

if TYPE_CHECKING:
    from .reaper import Reaper

logger = logging.getLogger("django_jobq")
T = TypeVar("T")


def parse_lanes(spec: str, default_slots: int) -> dict[str, int]:
    """'interactive:8,agents:2' -> {'interactive': 8, 'agents': 2}; a bare name gets default_slots."""
    lanes: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, slots = part.partition(":")
        if name in lanes:
            raise ConfigurationError(f"queue {name!r} is listed twice in {spec!r}")
        try:
            lanes[validation.name(name, "queue")] = int(slots) if slots else default_slots
        except ValueError:
            raise ConfigurationError(f"bad lane {part!r}: expected QUEUE or QUEUE:SLOTS") from None
    if not lanes or min(lanes.values()) < 1:
        raise ConfigurationError(f"bad --queues {spec!r}: need at least one queue, each with >= 1 slot")
    return lanes


@dataclass(eq=False)
class Running:
    job: Job
    attempt: int  # the current attempt (fencing token); in-slot retries raise it
    lane: Lane
    deadline: float | None  # monotonic time after which the timeout watchdog fails the job
    timed_out: bool = False
    writing: bool = False  # its outcome is being written: the row may leave RUNNING at any moment


@dataclass(eq=False)
class Lane:
    """One queue served by its own pool of slots, so a saturated lane never starves another.
    ``cond`` guards busy, outcomes, idle and woken."""

    queue: str
    slots: int
    busy: int = 0  # slots running a job
    outcomes: list[tuple[Running, Outcome]] = field(default_factory=list)  # finished, not yet written
    idle: bool = False  # the last claim found less than it asked for: wait for a wake-up or the poll
    woken: bool = False  # a notification arrived
    work: SimpleQueue[Job | None] = field(default_factory=SimpleQueue)
    cond: threading.Condition = field(default_factory=threading.Condition)
    done: threading.Event = field(default_factory=threading.Event)


class Worker:
    """Run jobs until stopped (or, with ``burst``, until nothing is due; or after ``max_jobs``)."""

    def __init__(
        self,
        lanes: dict[str, int],
        *,
        worker_id: str | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        grace: float = 30.0,
        poll_interval: float | None = None,
        listen: bool | None = None,
        reaper: Reaper | None = None,
    ):
        conf = jobq_settings()
        if problem := conf.lease_problem():
            raise ConfigurationError(problem)
        if max_jobs is not None and max_jobs < 1:
            raise ConfigurationError("max_jobs must be >= 1")
        if grace < 0:
            raise ConfigurationError("grace must be >= 0")
        self.lanes = {name: Lane(name, slots) for name, slots in lanes.items()}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.burst, self.max_jobs, self.grace = burst, max_jobs, grace
        self.poll_interval = conf.poll_interval if poll_interval is None else poll_interval
        self.listen = conf.notify if listen is None else listen
        self.reaper = reaper
        self.stopping = threading.Event()  # no new claims; finish what runs
        self.abandon = threading.Event()  # grace is over (or second signal): dispatchers leave now
        self.hard = threading.Event()  # second signal
        self.finished = threading.Event()  # background threads exit
        self.processed = 0  # jobs whose outcome was written
        self._claimed = 0
        self._running: dict[int, Running] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.listener: Listener | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> None:
        """Run until stop() (twice for a hard stop), burst exhaustion or max_jobs; then drain."""
        lanes = {q: lane.slots for q, lane in self.lanes.items()}
        logger.info("worker %s starting: lanes %s", self.worker_id, lanes)
        self._beat(stopped=False)
        self._start()
        try:
            while not self.stopping.is_set() and not all(lane.done.is_set() for lane in self.lanes.values()):
                self.stopping.wait(0.1)
        finally:
            try:
                self._shutdown()
            finally:
                connections.close_all()  # this thread's connection: a worker leaves none open

    def stop(self) -> None:
        """First call: drain gracefully. Second call: stop at once."""
        if self.stopping.is_set():
            logger.warning("worker %s: second stop request, stopping hard", self.worker_id)
            self.hard.set()
            self.abandon.set()
        self.stopping.set()
        self._wake_all()

    def _start(self) -> None:
        for lane in self.lanes.values():
            self._spawn(f"jobq-dispatch-{lane.queue}", self._dispatch, lane)
            for n in range(lane.slots):
                self._spawn(f"jobq-slot-{lane.queue}-{n}", self._slot, lane)
        self._spawn("jobq-heartbeat", self._heartbeat_loop)
        if self.listen:
            self.listener = Listener(self._on_notify, self.finished)
            self.listener.start()
        if self.reaper is not None:
            self._spawn("jobq-reaper", self.reaper.run, self.finished)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        def main() -> None:
            try:
                target(*args)
            except Exception:
                logger.exception("worker thread %s crashed", name)
                self.stop()
            finally:
                connections.close_all()

        thread = threading.Thread(target=main, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _shutdown(self) -> None:
        self.stopping.set()
        self._wake_all()
        deadline = time.monotonic() + self.grace
        for lane in self.lanes.values():  # dispatchers write what finishes within the grace period
            lane.done.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.abandon.set()
        self._wake_all()
        for lane in self.lanes.values():
            lane.done.wait(timeout=5)
        with self._lock:
            left = [(r.job.id, r.attempt) for r in self._running.values() if not r.timed_out]
        if left:
            released = self._db(lambda: Job.objects.release(self.worker_id, left), attempts=3) or []
            logger.warning(
                "worker %s: released %d unfinished job(s) to PENDING: %s",
                self.worker_id,
                len(released),
                released,
            )
        self._beat(stopped=True)
        self.finished.set()
        for lane in self.lanes.values():
            for _ in range(lane.slots):
                lane.work.put(None)
        # Idle threads end at once; a slot still inside a job function is left behind (daemon thread).
        end = time.monotonic() + 2
        for thread in [*self._threads, *([self.listener] if self.listener else [])]:
            thread.join(timeout=max(0.0, end - time.monotonic()))
        logger.info("worker %s stopped after %d job(s)", self.worker_id, self.processed)

    def _wake_all(self) -> None:
        for lane in self.lanes.values():
            with lane.cond:
                lane.woken = True
                lane.cond.notify_all()

    def _on_notify(self, queue_name: str | None) -> None:
        if queue_name is None:
            self._wake_all()
        elif lane := self.lanes.get(queue_name):
            with lane.cond:
                lane.woken = True
                lane.cond.notify_all()

    def _db(self, op: Callable[[], T], *, attempts: int | None = None) -> T | None:
        """Run ``op``; on a database error drop this thread's connection and retry with backoff.
        Gives up (None) after ``attempts`` tries, or when a hard stop is requested."""
        delay, tries = 0.05, 0
        while True:
            try:
                return op()
            except DatabaseError as exc:
                tries += 1
                connections[jobq_settings().database].close()
                if self.hard.is_set() or (attempts is not None and tries >= attempts):
                    logger.error("worker %s: database unavailable, giving up: %s", self.worker_id, exc)
                    return None
                logger.warning(
                    "worker %s: database error (%s); retrying in %.2fs", self.worker_id, exc, delay
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- dispatching -----------------------------------------------------------------------------------
    def _budget(self) -> int:
        """Jobs this worker may still claim (max_jobs)."""
        return 1 << 30 if self.max_jobs is None else self.max_jobs - self._claimed

    def _lane_finished(self, lane: Lane) -> bool:
        """Nothing runs or waits to be written, and nothing more will be claimed. Holds lane.cond."""
        if lane.busy or lane.outcomes:
            return False
        return self.stopping.is_set() or self._budget() <= 0 or (self.burst and lane.idle)

    def _wait_for_work(self, lane: Lane) -> list[tuple[Running, Outcome]] | None:
        """Block until there are outcomes to write or slots to fill; None when the lane is finished."""
        poll_at = time.monotonic() + self.poll_interval
        with lane.cond:
            while True:
                if self.abandon.is_set() or self._lane_finished(lane):
                    return None
                if lane.woken:
                    lane.idle = lane.woken = False
                if lane.idle and time.monotonic() >= poll_at:
                    lane.idle = False  # the safety-net poll
                can_claim = not self.stopping.is_set() and self._budget() > 0 and lane.busy < lane.slots
                if lane.outcomes or (can_claim and not lane.idle):
                    outcomes, lane.outcomes = lane.outcomes, []
                    return outcomes
                lane.cond.wait(timeout=max(0.001, poll_at - time.monotonic()) if lane.idle else 0.5)

    def _dispatch(self, lane: Lane) -> None:
        try:
            while (outcomes := self._wait_for_work(lane)) is not None:
                with self._lock:
                    for entry, _ in outcomes:
                        entry.writing = True
                successes = [(r, o) for r, o in outcomes if o.ok]
                for entry, outcome in outcomes:
                    if not outcome.ok:
                        self._write_failure(entry, outcome)
                with self._lock:
                    free = (
                        0 if self.stopping.is_set() else max(0, min(lane.slots - lane.busy, self._budget()))
                    )
                    self._claimed += free
                jobs = self._cycle(lane, successes, free)
                with self._lock:
                    self._claimed -= free - len(jobs)
                with lane.cond:
                    lane.idle = free > 0 and len(jobs) < free
                self._hand_out(lane, jobs)
        finally:
            lane.done.set()

    def _cycle(self, lane: Lane, successes: list[tuple[Running, Outcome]], limit: int) -> list[Job]:
        """Write the successes and claim up to ``limit`` jobs, in one statement."""
        lease = jobq_settings().lease_seconds
        done = [(r.job.id, o.attempt, o.result_json or "null") for r, o in successes]
        try:
            completed, jobs = Job.objects.complete_and_claim(self.worker_id, done, limit, lane.queue, lease)
        except DatabaseError as exc:
            connections[jobq_settings().database].close()
            logger.warning("worker %s lane %s: write/claim failed (%s)", self.worker_id, lane.queue, exc)
            # The statement may have committed without our hearing of it: write the successes again
            # (a row already DONE is resolved by re-reading it) and give back jobs claimed unknowingly.
            completed = self._db(lambda: Job.objects.complete_many(self.worker_id, done)) or set()
            completed |= {
                r.job.id for r, o in successes if r.job.id not in completed and self._was_written(r, o)
            }
            self._db(lambda: self._release_orphans(lane))
            jobs = []
        for entry, outcome in successes:
            self._forget(entry)
            if entry.job.id in completed:
                self._log_done(entry, outcome)
            else:
                logger.warning("job %s: result not recorded, the job is no longer ours", entry.job.id)
        return jobs

    def _hand_out(self, lane: Lane, jobs: list[Job]) -> None:
        default_timeout = jobq_settings().job_timeout
        now = time.monotonic()
        for job in jobs:
            task = find_task(job.task)
            timeout = (task.timeout if task else None) or default_timeout
            with self._lock:
                self._running[job.id] = Running(job, job.attempts, lane, now + timeout if timeout else None)
            with lane.cond:
                lane.busy += 1
            lane.work.put(job)

    def _release_orphans(self, lane: Lane) -> None:
        with self._lock:
            known = [job_id for job_id, r in self._running.items() if r.lane is lane]
        released = Job.objects.release_orphans(self.worker_id, lane.queue, known)
        if released:
            logger.warning(
                "worker %s: released %d job(s) from a lost claim reply", self.worker_id, len(released)
            )

    def _was_written(self, entry: Running, outcome: Outcome) -> bool:
        """Re-read a job whose DONE write went unconfirmed: True if the row shows our write."""
        state = self._db(lambda: Job.objects.state(entry.job.id))
        return state == (JobStatus.DONE, self.worker_id, outcome.attempt)

    # -- slots -----------------------------------------------------------------------------------------
    def _slot(self, lane: Lane) -> None:
        runner = SlotRunner(self.worker_id, self.stopping, self._on_new_attempt)
        try:
            while (job := lane.work.get()) is not None:
                self._run_one(lane, runner, job)
        finally:
            runner.close()

    def _run_one(self, lane: Lane, runner: SlotRunner, job: Job) -> None:
        with self._lock:
            entry = self._running.get(job.id)
        try:
            outcome = runner.run(job)
        except BaseException as exc:  # never let a job kill the slot
            outcome = Outcome(attempt=entry.attempt if entry else job.attempts, error=format_error(exc))
        discard = entry is None or entry.timed_out or outcome.abandoned
        if discard:
            with self._lock:
                if entry is not None and self._running.get(job.id) is entry:
                    del self._running[job.id]
        with lane.cond:
            lane.busy -= 1
            if not discard:
                lane.outcomes.append((entry, outcome))  # type: ignore[arg-type]
            lane.cond.notify_all()

    def _on_new_attempt(self, job_id: int, attempt: int) -> bool:
        with self._lock:
            entry = self._running.get(job_id)
            if entry is None or entry.timed_out:
                return False
            entry.attempt = attempt
            return True

    # -- outcomes --------------------------------------------------------------------------------------
    def _write_failure(self, entry: Running, outcome: Outcome) -> None:
        job = entry.job
        status = self._db(
            lambda: Job.objects.fail(
                job.id, self.worker_id, outcome.error, backoff_seconds=outcome.backoff,
                permanent=outcome.permanent, attempt=outcome.attempt,
            )
        )  # fmt: skip
        self._forget(entry)
        if status is None:
            logger.warning("job %s: failure not recorded (no longer owned by %s)", job.id, self.worker_id)
            return
        extra = {"job_id": job.id, "task": job.task, "attempt": outcome.attempt, "duration": outcome.duration}
        if status == JobStatus.DEAD:
            logger.error("job %s (%s) is DEAD after attempt %s:\n%s", job.id, job.task, outcome.attempt,
                         outcome.error, extra=extra)  # fmt: skip
            signals.job_dead.send(sender=Task, job=job, worker_id=self.worker_id, error=outcome.error)
        else:
            logger.warning("job %s (%s) attempt %s failed, retry scheduled: %s", job.id, job.task,
                           outcome.attempt, (outcome.error or "?").splitlines()[-1], extra=extra)  # fmt: skip
            signals.job_retried.send(
                sender=Task, job=job, worker_id=self.worker_id, error=outcome.error, delay=outcome.backoff
            )

    def _forget(self, entry: Running) -> None:
        with self._lock:
            if self._running.get(entry.job.id) is entry:
                del self._running[entry.job.id]
            self.processed += 1

    def _log_done(self, entry: Running, outcome: Outcome) -> None:
        job = entry.job
        if logger.isEnabledFor(logging.INFO):
            logger.info("job %s (%s) done in %.3fs (attempt %s)", job.id, job.task, outcome.duration,
                        outcome.attempt, extra={"job_id": job.id, "task": job.task, "attempt": outcome.attempt,
                                                "duration": outcome.duration})  # fmt: skip
        signals.job_succeeded.send(
            sender=Task,
            job=job,
            worker_id=self.worker_id,
            result=outcome.result_json,
            duration=outcome.duration,
        )

    # -- heartbeat and timeouts ------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        conf = jobq_settings()
        next_beat = time.monotonic() + conf.heartbeat_seconds
        while not self.finished.wait(min(1.0, conf.heartbeat_seconds)):
            self._enforce_timeouts()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + conf.heartbeat_seconds
                try:
                    self._heartbeat(conf.lease_seconds)
                except DatabaseError as exc:
                    connections[conf.database].close()
                    logger.warning("worker %s: heartbeat failed (%s)", self.worker_id, exc)
                    next_beat = time.monotonic() + min(1.0, conf.heartbeat_seconds)

    def _heartbeat(self, lease: float) -> None:
        with self._lock:
            held = [(job_id, r.attempt) for job_id, r in self._running.items() if not r.timed_out]
        renewed = Job.objects.heartbeat(self.worker_id, held, lease)
        with self._lock:
            lost = [
                job_id for job_id, attempt in held
                if job_id not in renewed
                and (r := self._running.get(job_id)) and r.attempt == attempt and not r.writing
            ]  # fmt: skip
        if lost:
            logger.warning(
                "worker %s lost the lease of job(s) %s; their outcome will be refused", self.worker_id, lost
            )
        self._beat(stopped=False)

    def _beat(self, *, stopped: bool) -> None:
        lanes = {name: lane.slots for name, lane in self.lanes.items()}
        self._db(
            lambda: Job.objects.worker_beat(
                self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), lanes=lanes,
                running=len(self._running), stopped=stopped,
            ),
            attempts=2,
        )  # fmt: skip

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [
                r
                for r in self._running.values()
                if r.deadline is not None and now > r.deadline and not r.timed_out
            ]
            for entry in late:
                entry.timed_out = True
                del self._running[entry.job.id]
        for entry in late:
            # A sync function cannot be interrupted: fail the job now so it is retried; the slot stays busy
            # until the function returns, and whatever it returns then is discarded.
            error = format_error(JobTimeout(f"job {entry.job.id} ran past its timeout"))
            self._write_failure(entry, Outcome(attempt=entry.attempt, error=error))
