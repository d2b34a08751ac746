"""The worker: lanes of slots fed by batched claims, a completer that writes outcomes in batches,
a heartbeat that renews every lease in one statement, LISTEN wake-ups and a graceful drain.

Threads: one dispatcher and N slot threads per lane, one completer, one heartbeat, one listener
(and optionally an embedded reaper). Each uses its own database connection.
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
from queue import Empty, SimpleQueue
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

COMPLETER_BATCH = 1000  # outcomes written per statement at most


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
class Lane:
    """One queue served by its own pool of slots, so a saturated lane never starves another."""

    queue: str
    slots: int
    busy: int = 0
    work: SimpleQueue[Job | None] = field(default_factory=SimpleQueue)
    cond: threading.Condition = field(default_factory=threading.Condition)
    wake: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class Running:
    job: Job
    attempt: int
    lane: Lane
    deadline: float | None  # monotonic time after which the timeout watchdog fails the job
    timed_out: bool = False


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
        if conf.lease_seconds <= conf.heartbeat_seconds:
            raise ConfigurationError(
                f'JOBQ["LEASE_SECONDS"] ({conf.lease_seconds}) must exceed JOBQ["HEARTBEAT_SECONDS"] '
                f"({conf.heartbeat_seconds}) or running jobs lose their lease between heartbeats"
            )
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
        self.stopping = threading.Event()  # no new claims
        self.hard = threading.Event()  # second signal: leave now
        self.finished = threading.Event()  # background threads exit
        self.processed = 0  # outcomes written
        self._claimed = 0
        self._running: dict[int, Running] = {}
        self._lock = threading.Lock()
        self._outcomes: SimpleQueue[tuple[Running, Outcome]] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._completer_done = threading.Event()
        self.listener: Listener | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> None:
        """Run until stop() (twice for a hard stop), burst exhaustion or max_jobs; then drain."""
        logger.info(
            "worker %s starting: lanes %s", self.worker_id, {q: ln.slots for q, ln in self.lanes.items()}
        )
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
        self.stopping.set()
        self._wake_all()

    def _start(self) -> None:
        for lane in self.lanes.values():
            self._spawn(f"jobq-dispatch-{lane.queue}", self._dispatch, lane)
            for n in range(lane.slots):
                self._spawn(f"jobq-slot-{lane.queue}-{n}", self._slot, lane)
        self._spawn("jobq-completer", self._complete_loop)
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
        while self._running and not self.hard.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._completer_done.set()  # the completer writes what is queued, then exits
        for thread in self._threads:
            if thread.name == "jobq-completer":
                thread.join(timeout=None if not self.hard.is_set() else 2)
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
            lane.wake.set()
            with lane.cond:
                lane.cond.notify_all()

    def _on_notify(self, queue_name: str | None) -> None:
        if queue_name is None:
            self._wake_all()
        elif lane := self.lanes.get(queue_name):
            lane.wake.set()

    # -- database access -------------------------------------------------------------------------------
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
    def _take_budget(self, free: int) -> int:
        with self._lock:
            if self.max_jobs is None:
                return free
            n = max(0, min(free, self.max_jobs - self._claimed))
            self._claimed += n
            return n

    def _return_budget(self, n: int) -> None:
        if self.max_jobs is not None and n:
            with self._lock:
                self._claimed -= n

    def _dispatch(self, lane: Lane) -> None:
        conf = jobq_settings()
        check_orphans = False
        try:
            while not self.stopping.is_set():
                with lane.cond:
                    while lane.busy >= lane.slots and not self.stopping.is_set():
                        lane.cond.wait(0.5)
                    free = lane.slots - lane.busy
                if self.stopping.is_set():
                    break
                n = self._take_budget(free)
                if n == 0:
                    with lane.cond:
                        if lane.busy == 0:
                            break
                    lane.wake.wait(0.05)
                    lane.wake.clear()
                    continue
                lane.wake.clear()  # before the claim: a notification after it wakes the next wait
                try:
                    if check_orphans:
                        self._release_orphans(lane)
                        check_orphans = False
                    jobs = Job.objects.claim_batch(
                        self.worker_id, n, queues=[lane.queue], lease_seconds=conf.lease_seconds
                    )
                except DatabaseError as exc:
                    self._return_budget(n)
                    connections[conf.database].close()
                    logger.warning("worker %s lane %s: claim failed (%s)", self.worker_id, lane.queue, exc)
                    check_orphans = True  # the claim may have committed without our hearing of it
                    self.stopping.wait(0.5)
                    continue
                self._return_budget(n - len(jobs))
                self._hand_out(lane, jobs, conf.job_timeout)
                if len(jobs) == n:
                    continue  # there may be more: claim again as soon as slots are free
                if self.burst and not jobs:
                    with lane.cond:
                        if lane.busy == 0:
                            break
                lane.wake.wait(self.poll_interval)
        finally:
            lane.done.set()

    def _hand_out(self, lane: Lane, jobs: list[Job], default_timeout: float | None) -> None:
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

    # -- slots -----------------------------------------------------------------------------------------
    def _slot(self, lane: Lane) -> None:
        runner = SlotRunner(self.worker_id, self.stopping, self._on_new_attempt)
        try:
            self._run_slot(lane, runner)
        finally:
            runner.close()

    def _run_slot(self, lane: Lane, runner: SlotRunner) -> None:
        while (job := lane.work.get()) is not None:
            with self._lock:
                entry = self._running.get(job.id)
            try:
                outcome = runner.run(job)
            except BaseException as exc:  # never let a job kill the slot
                outcome = Outcome(attempt=entry.attempt if entry else job.attempts, error=format_error(exc))
            with lane.cond:
                lane.busy -= 1
                lane.cond.notify_all()
            if self.burst:
                lane.wake.set()
            if entry is None or entry.timed_out or outcome.abandoned:
                with self._lock:
                    if self._running.get(job.id) is entry:
                        del self._running[job.id]
                continue
            self._outcomes.put((entry, outcome))

    def _on_new_attempt(self, job_id: int, attempt: int) -> bool:
        with self._lock:
            entry = self._running.get(job_id)
            if entry is None or entry.timed_out:
                return False
            entry.attempt = attempt
            return True

    # -- writing outcomes ------------------------------------------------------------------------------
    def _complete_loop(self) -> None:
        while True:
            try:
                batch = [self._outcomes.get(timeout=0.05)]
            except Empty:
                if self._completer_done.is_set():
                    return
                continue
            while len(batch) < COMPLETER_BATCH:
                try:
                    batch.append(self._outcomes.get_nowait())
                except Empty:
                    break
            self._write(batch)

    def _write(self, batch: list[tuple[Running, Outcome]]) -> None:
        done = [(r, o) for r, o in batch if o.ok]
        if done:
            triples = [(r.job.id, o.attempt, o.result_json or "null") for r, o in done]
            written = self._db(lambda: Job.objects.complete_many(self.worker_id, triples))
            for entry, outcome in done:
                confirmed = written is not None and (
                    entry.job.id in written or self._resolve(entry, outcome, JobStatus.DONE)
                )
                self._forget(entry)
                if confirmed:
                    self._log_done(entry, outcome)
        for entry, outcome in batch:
            if not outcome.ok:
                self._write_failure(entry, outcome)

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

    def _resolve(self, entry: Running, outcome: Outcome, expected: int) -> bool:
        """A write the database did not confirm (connection lost mid-commit, then retried): re-read the
        job. True when our write is what the row shows."""
        state = self._db(lambda: Job.objects.state(entry.job.id))
        ours = (
            state is not None
            and state[0] == expected
            and state[1] == self.worker_id
            and state[2] == outcome.attempt
        )
        if not ours:
            logger.warning(
                "job %s: outcome not recorded, the job is no longer ours (%s)", entry.job.id, state
            )
        return ours

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
                if job_id not in renewed and (r := self._running.get(job_id)) and r.attempt == attempt
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
            outcome = Outcome(attempt=entry.attempt, error=error, backoff=None)
            self._write_failure(entry, outcome)
