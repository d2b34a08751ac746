"""The reaper: returns expired leases to the queue, prunes old finished jobs and expired inbound
delivery marks. One acts at a time across all replicas: the holder of the "reaper" row in jobq_lease,
renewed on every pass; the others stand by and take over once the holder releases it (a clean stop)
or lets it expire (a crash, a hung pass, a lost host). Two reapers acting at once for a moment is
harmless: every statement is guarded.

A pass prunes in bounded batches, so it never runs unbounded; a pass that stopped at a bound with rows
still to go (a backlog) is followed by the next one at once, not after the interval. So what the
reaper prunes per second is bounded by what the database deletes, never by the interval: rows that
expire faster than one pass's bound (jobq_inbound marks above 4 x PRUNE_BATCH per interval, say) are
deleted as they come instead of piling up without end."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass

import psycopg
from django.db import Error as DatabaseError
from django.db import connections

from . import ratelimit
from .conf import jobq_settings
from .dedupe import MAX_MARK_BATCHES, prune_expired_marks
from .managers.outbox import OUTBOX_GRACE_SECONDS, RELAY_BATCH
from .models import Job
from .status import JobStatus

logger = logging.getLogger("django_jobq")

LEASE_NAME = "reaper"
LEASE_MARGIN_SECONDS = 5.0  # the role's lease: three intervals plus this
MAX_PRUNE_BATCHES = 100  # per pass and status, so one pass never runs unbounded
WORKER_RECORD_RETENTION = 7 * 24 * 3600
AUTOVACUUM_OFF = (
    "reaper: autovacuum does not vacuum jobq_job (the server's autovacuum, or the table's, is off): "
    "every finished job leaves dead rows that only a manual VACUUM removes, and the table grows"
)


@dataclass(frozen=True, slots=True)
class PassResult:
    reaped: list[int]
    pruned_done: int
    pruned_dead: int
    pruned_marks: int = 0  # expired inbound delivery marks (django_jobq.dedupe)
    pruned_rates: int = 0  # rate-limit rows of keys at rest (django_jobq.ratelimit)
    backlog: bool = False  # a prune stopped at its per-pass bound: the next pass comes at once
    pruned_cancelled: int = 0


class Reaper:
    def __init__(self, *, interval: float | None = None):
        conf = jobq_settings()
        self.interval = conf.reap_interval if interval is None else interval
        self.lease_seconds = 3 * self.interval + LEASE_MARGIN_SECONDS
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.is_leader = threading.Event()

    # -- leadership ------------------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Take or renew the reaper's lease; True while this process holds it."""
        Job.objects.bound_statements()
        if Job.objects.acquire_lease(LEASE_NAME, self.holder, self.lease_seconds):
            if not self.is_leader.is_set():
                logger.info("reaper %s: acting (holds the reaper lease)", self.holder)
                self.is_leader.set()
                if Job.objects.autovacuum_on() is False:
                    logger.warning(AUTOVACUUM_OFF)
            return True
        self.is_leader.clear()
        return False

    def release(self) -> None:
        """Give the role up at once, so a standby takes over on its next pass."""
        if self.is_leader.is_set():
            self.is_leader.clear()
            try:
                Job.objects.release_lease(LEASE_NAME, self.holder)
            except DatabaseError as exc:  # it expires on its own
                logger.warning("reaper %s: could not release the lease (%s)", self.holder, exc)

    # -- work ------------------------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        """One pass: reap every expired lease, refresh the MAX_DEPTH baselines, then prune in bounded
        batches. Call while holding the lease."""
        conf = jobq_settings()
        Job.objects.bound_statements()
        reaped = Job.objects.reap()
        if reaped:
            logger.warning("reaper: returned %d job(s) with expired leases: %s", len(reaped), reaped[:50])
        Job.objects.refresh_depths()
        if conf.shards:  # what the enqueuing processes did not relay (django_jobq.managers.outbox)
            relayed = Job.objects.relay_outbox(grace=OUTBOX_GRACE_SECONDS)
            while relayed == RELAY_BATCH:
                relayed = Job.objects.relay_outbox(grace=OUTBOX_GRACE_SECONDS)
        batch = conf.prune_batch
        pruned = {
            status: self._prune(status, retention, batch)
            for status, retention in (
                (JobStatus.DONE, conf.done_retention_seconds),
                (JobStatus.DEAD, conf.dead_retention_seconds),
                (JobStatus.CANCELLED, conf.cancelled_retention_seconds),
            )
        }
        Job.objects.prune_workers(WORKER_RECORD_RETENTION)
        Job.objects.prune_fair_keys(batch)
        if conf.fair_queues():
            Job.objects.vacuum_fair_keys()
        marks = prune_expired_marks(batch)
        rates = ratelimit.prune(batch=batch)
        backlog = max(pruned.values()) >= MAX_PRUNE_BATCHES * batch or marks >= MAX_MARK_BATCHES * batch
        return PassResult(
            reaped, pruned[JobStatus.DONE], pruned[JobStatus.DEAD], marks, rates, backlog,
            pruned[JobStatus.CANCELLED],
        )  # fmt: skip

    @staticmethod
    def _prune(status: JobStatus, retention: float, batch: int) -> int:
        total = 0
        for _ in range(MAX_PRUNE_BATCHES):
            deleted = Job.objects.prune(status, retention, batch)
            total += deleted
            if deleted < batch:
                break
        return total

    def run_until_clear(self) -> PassResult:
        """Passes one after another while a backlog remains and this process holds the lease (the
        first pass needs it held already); their results summed. For ``jobq_reap --once``."""
        total = self.run_once()
        while total.backlog and self.acquire():
            more = self.run_once()
            total = PassResult(
                total.reaped + more.reaped, total.pruned_done + more.pruned_done,
                total.pruned_dead + more.pruned_dead, total.pruned_marks + more.pruned_marks,
                total.pruned_rates + more.pruned_rates, more.backlog,
                total.pruned_cancelled + more.pruned_cancelled,
            )  # fmt: skip
        return total

    def run(self, stopping: threading.Event) -> None:
        """Act whenever this process holds the lease; stand by otherwise. Until ``stopping`` is set.
        After a pass that left a backlog the next one starts at once."""
        try:
            while not stopping.is_set():
                backlog = False
                try:
                    if self.acquire():
                        backlog = self.run_once().backlog
                except (DatabaseError, psycopg.Error) as exc:  # psycopg's: the rate-limit pool
                    logger.warning("reaper: database error (%s); retrying", exc)
                    connections[jobq_settings().database].close()
                if not backlog:
                    stopping.wait(self.interval)
        finally:
            self.release()
