"""Consuming jobs: every fenced write a worker makes about the jobs it holds (the claims: claiming.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import validation
from ..conf import jobq_settings
from ..status import JobStatus
from .claiming import ClaimManager
from .written import Beat, Written

if TYPE_CHECKING:
    pass


def result_json(value: Any) -> str:
    """A task's return value as stored: strict JSON within JOBQ["MAX_RESULT_BYTES"]."""
    if value is None:  # most tasks return nothing
        return "null"
    text = validation.dump_json(value, what="result")
    return validation.sized(text, jobq_settings().max_result_bytes, "result", "MAX_RESULT_BYTES")


class ConsumerManager(ClaimManager):
    def complete(self, job_id: int, worker_id: str, result: Any = None, *, fence: int | None = None) -> bool:
        """RUNNING -> DONE (CANCELLED when a cancel was asked meanwhile); False when ``worker_id`` (in
        the run holding ``fence``) no longer owns the job.

        Without ``fence`` any run of this owner is completed: for manual use only, a worker passes it."""
        return self.complete_json(job_id, worker_id, result_json(result), fence=fence) is not None

    def complete_json(
        self, job_id: int, worker_id: str, result: str, *, fence: int | None = None
    ) -> JobStatus | None:
        """complete() with the result already as JSON text (checked by result_json): the status
        written (DONE, or CANCELLED when a cancel was asked: the result is discarded), None when not
        the owner."""
        params = {
            "id": job_id,
            "worker_id": validation.name(worker_id, "worker_id"),
            "fence": self._fence(fence),
            "result": result,
        }
        rows = self._execute(self._sql().COMPLETE, params)
        return JobStatus(rows[0][0]) if rows else None

    def complete_many(self, worker_id: str, done: Sequence[tuple[int, int, str]]) -> Written:
        """Complete (id, fence, result JSON text) triples in one statement, never waiting for a row
        another transaction holds (those come back busy)."""
        if not done:
            return Written()
        ids, fences, results = (list(column) for column in zip(*done, strict=True))
        params = {"worker_id": worker_id, "ids": ids, "fences": fences, "results": results}
        rows = self._execute(self._sql().COMPLETE_MANY, params)
        return Written(
            done=frozenset(i for i, status, _ in rows if status == JobStatus.DONE),
            cancelled=frozenset(
                i for i, status, _ in rows if status is not None and status != JobStatus.DONE
            ),
            busy=frozenset(i for i, status, _ in rows if status is None),
            settled=any(bool(waited_on) for _, status, waited_on in rows if status is not None),
        )

    def fail(
        self,
        job_id: int,
        worker_id: str,
        error: Any,
        *,
        backoff_seconds: float | None = None,
        permanent: bool = False,
        fence: int | None = None,
        error_class: str | None = None,
        discard: bool = False,
    ) -> JobStatus | None:
        """RUNNING -> PENDING (retry after the backoff), DEAD, or CANCELLED (``discard``, or a cancel
        was asked of the job); None when not the owner.

        Without ``backoff_seconds`` the delay is full jitter below compute_backoff(attempts); without
        ``fence`` any run of this owner is failed (manual use only)."""
        conf = jobq_settings()
        params = {
            "id": job_id,
            "worker_id": validation.name(worker_id, "worker_id"),
            "fence": self._fence(fence),
            "permanent": bool(permanent),
            "discard": bool(discard),
            "error": validation.error_text(error),
            "error_class": None if error_class is None else validation.error_text(error_class),
            "base": conf.backoff_base,
            "cap": conf.backoff_cap,
            "backoff": None
            if backoff_seconds is None
            else validation.seconds(backoff_seconds, "backoff_seconds"),
        }
        rows = self._execute(self._sql().FAIL, params)
        return JobStatus(rows[0][0]) if rows else None

    def renew_lease(
        self, job_id: int, worker_id: str, lease_seconds: float | None = None, *, fence: int | None = None
    ) -> bool:
        """Set the lease of an owned RUNNING job to now + ``lease_seconds``; False when not the owner."""
        params = {
            "id": job_id,
            "worker_id": validation.name(worker_id, "worker_id"),
            "fence": self._fence(fence),
            "lease": self._lease(lease_seconds),
        }
        return bool(self._execute(self._sql().RENEW_LEASE, params))

    def heartbeat(
        self, worker_id: str, running: Sequence[tuple[int, int]], lease_seconds: float | None = None
    ) -> set[tuple[int, int]]:
        """Renew the leases of all (id, fence) a worker runs, in one statement (never shortening one);
        returns the (id, fence) pairs whose run no longer owns its job (lost)."""
        return set(self.beat(worker_id, running, lease_seconds).lost)

    def beat(
        self, worker_id: str, running: Sequence[tuple[int, int]], lease_seconds: float | None = None
    ) -> Beat:
        """heartbeat(), and the runs still owned that a cancel was asked of, and those whose row another
        transaction holds (not renewed; never waited for)."""
        if not running:
            return Beat()
        ids, fences = (list(column) for column in zip(*running, strict=True))
        params = {"worker_id": worker_id, "ids": ids, "fences": fences, "lease": self._lease(lease_seconds)}
        kinds: dict[str, set[tuple[int, int]]] = {"lost": set(), "asked": set(), "busy": set()}
        for job_id, fence, kind in self._execute(self._sql().HEARTBEAT, params):
            kinds[kind].add((job_id, fence))
        return Beat(**{kind: frozenset(runs) for kind, runs in kinds.items()})

    def snooze_run(self, job_id: int, worker_id: str, fence: int, delay: float) -> JobStatus | None:
        """A run that raised Snooze: back to PENDING after ``delay`` seconds without using an attempt
        (CANCELLED if a cancel was asked); None when the run no longer owns the job."""
        params = {
            "id": job_id, "worker_id": validation.name(worker_id, "worker_id"), "fence": self._fence(fence),
            "delay": validation.seconds(delay, "delay"),
        }  # fmt: skip
        rows = self._execute(self._sql().SNOOZE_RUN, params)
        return JobStatus(rows[0][0]) if rows else None

    def release(self, worker_id: str) -> list[int]:
        """Give every job ``worker_id`` holds back as PENDING at once (graceful shutdown); the ids.
        The first JOBQ["FREE_RELEASES"] releases of a job do not use up an attempt."""
        params = {"worker_id": validation.name(worker_id, "worker_id"), "free": jobq_settings().free_releases}
        return [row[0] for row in self._execute(self._sql().RELEASE, params)]

    def release_unstarted(self, worker_id: str, runs: Sequence[tuple[int, int]]) -> list[int]:
        """Give back runs (job id, fence) that ``worker_id`` claimed ahead and never started: PENDING
        at once, in their place, no attempt used, idle workers woken; the ids given back."""
        if not runs:
            return []
        conf = jobq_settings()
        params = {
            "worker_id": validation.name(worker_id, "worker_id"),
            "ids": [job_id for job_id, _ in runs],
            "fences": [fence for _, fence in runs],
            "notify": conf.notify,
            "channel": conf.notify_channel,
        }
        rows = self._execute(self._sql().RELEASE_UNSTARTED, params)
        if rows:
            self._wake(sorted({row[1] for row in rows}))
        return [row[0] for row in rows]

    def due_exists(self, queue: str | None, *, exclude: Sequence[str] = ()) -> bool:
        """Is a PENDING job due in ``queue`` (None: in any queue but ``exclude``)?"""
        sql = self._sql()
        if queue is None:
            return bool(self._execute(sql.DUE_EXISTS_REST, {"exclude": list(exclude)})[0][0])
        return bool(self._execute(sql.DUE_EXISTS, {"queue": queue})[0][0])

    def retry_in_slot(
        self,
        job_id: int,
        worker_id: str,
        fence: int,
        error: Any,
        lease_seconds: float | None = None,
        *,
        error_class: str | None = None,
    ) -> tuple[int, int] | None:
        """Record a failed attempt and begin the next one without releasing the job: the new (attempt,
        fence), or None when not the owner or no attempts remain."""
        params = {
            "id": job_id, "worker_id": worker_id, "fence": fence,
            "error": validation.error_text(error), "lease": self._lease(lease_seconds),
            "error_class": None if error_class is None else validation.error_text(error_class),
        }  # fmt: skip
        rows = self._execute(self._sql().RETRY_IN_SLOT, params)
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def release_orphans(
        self, worker_id: str, queue: str | None, known: Sequence[int], *, exclude: Sequence[str] = ()
    ) -> list[int]:
        """Give back jobs of ``queue`` (None: of every queue but ``exclude``) held by ``worker_id``
        other than ``known`` (lost claim replies)."""
        params = {"worker_id": worker_id, "queue": queue, "known": list(known), "exclude": list(exclude)}
        sql = self._sql()
        statement = sql.RELEASE_ORPHANS if queue is not None else sql.RELEASE_ORPHANS_REST
        return [row[0] for row in self._execute(statement, params)]

    def local_timeouts(self, lock_seconds: float) -> None:
        """Bound the current transaction's row-lock waits by ``lock_seconds`` (0: no bound, nor on its
        statements; otherwise they keep JOBQ["STATEMENT_TIMEOUT"])."""
        statement = 0.0 if lock_seconds == 0 else jobq_settings().statement_timeout
        params = {"statement_ms": f"{int(statement * 1000)}ms", "lock_ms": f"{int(lock_seconds * 1000)}ms"}
        self._execute(self._sql().LOCAL_TIMEOUTS, params)

    def lock_job(self, job_id: int) -> bool:
        """Take the job's row lock until the transaction ends, waiting for its holder; False when the
        job no longer exists."""
        return bool(self._execute(self._sql().LOCK_JOB, {"id": job_id}))

    def state(self, job_id: int) -> tuple[JobStatus, str | None, int] | None:
        """(status, worker_id, fence) of a job, or None if it no longer exists."""
        rows = self._execute(self._sql().JOB_STATE, {"id": job_id})
        return (JobStatus(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    def set_progress(self, job_id: int, worker_id: str, fence: int, done: float, total: float | None) -> bool:
        """Record progress of an owned RUNNING job (shown by the admin)."""
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "fence": fence,
            "progress": validation.dump_json({"done": done, "total": total}, what="progress"),
        }
        return bool(self._execute(self._sql().SET_PROGRESS, params))

    def worker_beat(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        lanes: dict[str, int],
        running: int,
        stopped: bool,
        stuck: dict[str, int] | None = None,
        supervisor: dict[str, Any] | None = None,
    ) -> None:
        """Record that a worker is alive (or has stopped) in jobq_worker; ``supervisor``: what its
        supervisor last told it about itself (jobq_worker --processes)."""
        params = {
            "worker_id": worker_id, "hostname": hostname, "pid": pid, "lanes": validation.dump_json(lanes),
            "running": running, "stopped": stopped, "stuck": validation.dump_json(stuck or {}),
            "supervisor": None if supervisor is None else validation.dump_json(supervisor, what="supervisor"),
        }  # fmt: skip
        self._execute(self._sql().WORKER_BEAT, params)
