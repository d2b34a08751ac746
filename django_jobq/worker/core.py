"""The Worker: lanes of slots, each fed by one dispatcher thread that writes the lane's finished jobs
and claims as many new ones as there are free slots in a single statement (leaving paused queues
out); a heartbeat that renews every lease in one statement; LISTEN wake-ups; a graceful drain.

Threads: one dispatcher and N slot threads per lane, one heartbeat, one side writer, one listener
(and optionally an embedded reaper and scheduler). Each uses its own database connection.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections

from .. import validation
from ..checks.engine import engine_problems
from ..checks.shards import range_problem
from ..conf import jobq_settings
from ..database_context import carrying_database
from ..exceptions import ConfigurationError, InvalidJob
from ..managers.seats import TASK_SEATS
from ..models import Job
from ..notify import wakeup
from ..notify.idle_lock import IdleLock
from ..notify.listener import CLAIM_AGAIN, STATE_CHANGED, Listener
from ..sql import engine_for
from . import startup
from .heartbeat import HeartbeatMixin
from .lanes import ALL_QUEUES, Lane, check_lanes
from .lock_waits import LockWaits
from .outage import Outage
from .side import SideWriter
from .slots import SlotMixin

if TYPE_CHECKING:
    from ..reaper import Reaper
    from ..scheduler import Scheduler

logger = logging.getLogger("django_jobq")


class Worker(HeartbeatMixin, SlotMixin):
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
        scheduler: Scheduler | None = None,
    ):
        conf = jobq_settings()
        if problem := conf.lease_problem():
            raise ConfigurationError(problem)
        if problems := engine_problems(tasks=False):
            raise ConfigurationError("; ".join(problems))
        if max_jobs is not None and max_jobs < 1:
            raise ConfigurationError("max_jobs must be >= 1")
        if grace < 0:
            raise ConfigurationError("grace must be >= 0")
        try:
            self.worker_id = validation.name(
                worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}", "worker id"
            )
        except InvalidJob as exc:
            raise ConfigurationError(str(exc)) from None
        if conf.shards:  # a named lane of another database's queue would never find its jobs
            check_lanes(lanes, conf.database)
            try:
                problem = range_problem(conf.database)  # its ids could be another shard's
            except DatabaseError:  # down now: its outage is reported (and retried) once running
                connections[conf.database].close()
                problem = None
            if problem:
                raise ConfigurationError(problem)
        named = tuple(sorted(q for q in lanes if q != ALL_QUEUES))
        self.lanes = {
            name: Lane(name, slots, exclude=named if name == ALL_QUEUES else ())
            for name, slots in lanes.items()
        }
        self.burst, self.max_jobs, self.grace = burst, max_jobs, grace
        self.poll_interval = conf.poll_interval if poll_interval is None else poll_interval
        # LISTEN where the engine has it; elsewhere polling, and wake-ups from this process's enqueues.
        self.listen = (conf.notify if listen is None else listen) and self._engine_listens()
        self.wake_in_process = conf.notify and not self._engine_listens()
        self.reaper = reaper
        self.scheduler = scheduler
        self.started = threading.Event()  # its threads run (a supervisor waits for this)
        self.stopping = threading.Event()
        self.abandon = threading.Event()
        self.hard = threading.Event()
        self.finished = threading.Event()
        self.processed = 0
        self.exit_code = 0
        self.supervision: dict[str, Any] | None = None  # what a supervisor told it (supervisor/link.py)
        self._claimed = 0
        self._took_seats = False
        self._seats_away = set()
        self._ended = 0
        self._cycling = 0
        self._unknown_tasks = set()
        self._running = {}
        self._lock = threading.Lock()
        self._batch_claims = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.listener = None
        self.idle_lock = None
        self._side_writer = SideWriter()
        self.outage = Outage(self.worker_id)
        self.lock_waits = LockWaits(self.worker_id)
        self.paused = frozenset()  # the paused queues, as last read (pausing.PauseMixin)
        self._paused_lock = threading.Lock()
        self._paused_stale = threading.Event()
        self._paused_next = 0.0

    # -- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> None:
        """Run until stop() (twice for a hard stop), burst exhaustion or max_jobs; then drain.
        ConfigurationError when another live worker uses the same worker id."""
        try:
            self._claim_identity()
        except BaseException:
            self._side_writer.close()
            connections.close_all()
            raise
        logger.info(startup.banner(self))
        startup.warn_unnamed_lanes(self)
        self._beat(stopped=False)
        self._start()
        self.started.set()
        try:
            while not self.stopping.is_set() and not all(lane.done.is_set() for lane in self.lanes.values()):
                self.stopping.wait(0.1)
        finally:
            try:
                self._shutdown()
            finally:
                connections.close_all()  # this thread's connection: a worker leaves none open

    def _claim_identity(self) -> None:
        """Wait (up to a lease) for an earlier process with this worker id to be seen no more; refuse
        to start beside a live one, whose jobs this worker would otherwise release as its own."""
        conf = jobq_settings()
        deadline = time.monotonic() + conf.lease_seconds + conf.heartbeat_seconds
        while self._db(lambda: Job.objects.worker_is_live(self.worker_id, conf.lease_seconds), attempts=3):
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"another live worker uses the worker id {self.worker_id!r}; give each process its own"
                )
            time.sleep(min(1.0, conf.heartbeat_seconds / 2))

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
                self._spawn(f"jobq-slot-{lane.queue}-{n}", self._slot, lane, n)
        self._spawn("jobq-heartbeat", self._heartbeat_loop)
        if self.listen:
            # their connections' losses join the worker's outage log (once, summarised, its end)
            self.listener = Listener(self._on_notify, self.finished, self.outage.failed, self.outage.ok)
            self.listener.start()
            self.idle_lock = IdleLock(self._wake_all, self.outage.failed, self.outage.ok)
            self.idle_lock.start()
        elif self.wake_in_process:
            wakeup.register(self._on_notify)
        if self.reaper is not None:
            self._spawn("jobq-reaper", self.reaper.run, self.finished)
        if self.scheduler is not None:
            self._spawn("jobq-scheduler", self.scheduler.run, self.finished)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        def main() -> None:
            try:
                target(*args)
            except Exception:
                logger.exception("worker thread %s crashed", name)
                self.stop()
            finally:
                connections.close_all()

        thread = threading.Thread(target=carrying_database(main), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _shutdown(self) -> None:
        self.stopping.set()
        self._wake_all()
        deadline = time.monotonic() + self.grace
        for lane in self.lanes.values():  # dispatchers write what finishes within the grace period
            lane.done.wait(timeout=max(0.0, deadline - time.monotonic()))
        # a finished job whose row another transaction holds is written once it lets go, within the grace
        self.lock_waits.drain(max(0.0, deadline - time.monotonic()))
        self.abandon.set()
        self._wake_all()
        for lane in self.lanes.values():
            lane.done.wait(timeout=5)
        self._fail_timed_out()
        # Everything still RUNNING under this worker's id goes back, known to it or not (a late claim
        # reply, a run whose in-slot retry raced the watchdog); tried even on a hard stop.
        released = self._db(lambda: Job.objects.release(self.worker_id), attempts=3) or []
        if released:
            logger.warning(
                "worker %s: released %d unfinished job(s) to PENDING: %s",
                self.worker_id, len(released), released,
            )  # fmt: skip
        self._free_all_seats()
        self.lock_waits.close()  # what still waits is left to the lease, once the row's holder lets go
        wakeup.unregister(self._on_notify)
        self._beat(stopped=True)
        self.finished.set()
        if self.idle_lock is not None:
            self.idle_lock.stop()
        for lane in self.lanes.values():
            for _ in range(lane.slots):
                lane.work.put(None)
        # Idle threads end at once; a slot still inside a job function is left behind (daemon thread).
        end = time.monotonic() + 2
        for thread in [*self._threads, *(t for t in (self.listener, self.idle_lock) if t is not None)]:
            thread.join(timeout=max(0.0, end - time.monotonic()))
        self._side_writer.close()
        logger.info("worker %s stopped after %d job(s)", self.worker_id, self.processed)

    @staticmethod
    def _engine_listens() -> bool:
        return engine_for(jobq_settings().database).capabilities.listen_notify

    def _on_notify(self, queue_name: str | None) -> None:
        if queue_name is None or queue_name == STATE_CHANGED:  # a pause or resume, or a reconnect
            self._state_changed()
        elif queue_name == CLAIM_AGAIN:  # a worker took the idle lock
            self._wake_all()
        elif queue_name.startswith(TASK_SEATS):  # a capped task's seats came free: every lane may use them
            for each in self.lanes.values():
                self._wake(each, queue_name)
        elif lane := self.lanes.get(queue_name) or self.lanes.get(ALL_QUEUES):
            self._wake(lane, queue_name)

    def _wake(self, lane: Lane, name: str) -> None:
        """A notification named ``name`` (a queue's, or a capped task's seats') for ``lane``: it may
        take the seats of that name at once, and claims again."""
        with lane.cond:
            self._seat_woken(lane, name)
            lane.woken = True
            lane.cond.notify_all()
