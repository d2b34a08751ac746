"""Consuming jobs: claim, and every fenced write a worker makes about the jobs it holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..registry import capped_tasks
from ..status import JobStatus
from .capping import CapManager
from .written import Beat, Written

if TYPE_CHECKING:
    from ..models import Job


def result_json(value: Any) -> str:
    """A task's return value as stored: strict JSON within JOBQ["MAX_RESULT_BYTES"]."""
    text = validation.dump_json(value, what="result")
    return validation.sized(text, jobq_settings().max_result_bytes, "result", "MAX_RESULT_BYTES")


# A complete_and_claim statement's parameters that make it claim only.
_CLAIM_ONLY: dict[str, Any] = {"ids": [], "fences": [], "results": []}


class ConsumerManager(CapManager):
    def claim(
        self, worker_id: str, *, queues: Sequence[str] | None = None, lease_seconds: float | None = None
    ) -> Job | None:
        """Take the next due job (lowest priority value, then run_at, then id) or None."""
        jobs = self.claim_batch(worker_id, 1, queues=queues, lease_seconds=lease_seconds)
        return jobs[0] if jobs else None

    def claim_batch(
        self,
        worker_id: str,
        limit: int,
        *,
        queues: Sequence[str] | None = None,
        lease_seconds: float | None = None,
    ) -> list[Job]:
        """Take up to ``limit`` due jobs in one statement; each comes back RUNNING with attempts + 1
        and a new fence."""
        sql = self._sql()
        params: dict[str, Any] = {
            "worker_id": validation.name(worker_id, "worker_id"),
            "limit": validation.integer(limit, "limit", 1, 100_000),
            "lease": self._lease(lease_seconds),
        }
        if queues is None:
            statement = sql.CLAIM_ANY_QUEUE
        else:
            if isinstance(queues, str) or not queues:
                raise InvalidJob("queues must be a non-empty list of queue names (or None for all)")
            names = list(dict.fromkeys(validation.name(q, "queue") for q in queues))
            statement, params["queue"], params["queues"] = (
                (sql.CLAIM_ONE_QUEUE, names[0], None) if len(names) == 1 else (sql.CLAIM_QUEUES, None, names)
            )
        return self._jobs(statement, params)

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

    def complete_and_claim(
        self,
        worker_id: str,
        done: Sequence[tuple[int, int, str]],
        limit: int,
        queue: str | None,
        lease_seconds: float | None = None,
        *,
        exclude: Sequence[str] = (),
        look_past: bool = True,
        rations: Mapping[str, int] | None = None,
        task_rations: Mapping[str, int] | None = None,
    ) -> tuple[Written, list[Job]]:
        """complete_many and claim_batch for one queue (or, with ``queue=None``, every queue but
        ``exclude``) in a single statement (one commit). A queue with JOBQ["QUEUES"][q]["MAX_RUNNING"]
        is claimed from under that cap, across every worker (claim and claim_batch ignore caps).
        When a task cap cut the claim short, it claims again for the jobs behind those held back
        unless ``look_past`` is False (that reads the held-back jobs: the worker does it at most
        every LOOK_PAST_SECONDS while it finds nothing there). ``rations``: queues of which it claims
        no more than that many jobs (the rate-limit permits the worker holds for them), each apart.
        ``task_rations``: rate-limited tasks of which it claims no more than that many jobs in all
        (none at 0), by the pick, as it keeps to task caps.

        Returns what the completion wrote (Written) and the jobs claimed (``limit`` may be 0)."""
        ids, fences, results = (list(c) for c in zip(*done, strict=True)) if done else ([], [], [])
        params: dict[str, Any] = {
            "worker_id": worker_id, "ids": ids, "fences": fences, "results": results,
            "limit": validation.integer(limit, "limit", 0, 100_000), "queue": queue,
            "lease": self._lease(lease_seconds), "exclude": list(exclude), "cap": None,
            **self._task_caps(task_rations or {}),
        }  # fmt: skip
        caps, rations = jobq_settings().caps(), rations or {}
        if queue is not None:
            limit = min(params["limit"], rations.get(queue, limit))
            return self._complete_and_claim({**params, "cap": caps.get(queue), "limit": limit}, look_past)
        # The "*" lane: each rationed queue apart, at most its ration; then every other uncapped queue
        # in one statement (which also writes the completions); then each capped one it serves.
        jobs: list[Job] = []
        for name, most in sorted(rations.items()):
            if most > 0 and len(jobs) < limit:
                more = {**params, **_CLAIM_ONLY, "queue": name, "cap": caps.get(name)}
                found = self._complete_and_claim({**more, "limit": min(most, limit - len(jobs))}, look_past)[
                    1
                ]
                jobs += self._spend_rations(params, found)
        params["exclude"] = [*exclude, *caps, *rations]
        written, found = self._complete_and_claim({**params, "limit": limit - len(jobs)}, look_past)
        jobs += self._spend_rations(params, found)
        for name in sorted(set(caps) - set(exclude) - set(rations)):
            if len(jobs) >= limit:
                break
            more = {**params, **_CLAIM_ONLY, "queue": name, "cap": caps[name]}
            jobs += self._spend_rations(
                params, self._complete_and_claim({**more, "limit": limit - len(jobs)}, look_past)[1]
            )
        return written, jobs

    def _complete_and_claim(self, params: dict[str, Any], look_past: bool) -> tuple[Written, list[Job]]:
        """One complete-and-claim statement: for one queue (capped: under the queue's CAP_LOCK, in a
        transaction of its own), or for every queue but params["exclude"]. While tasks have caps, the
        pick leaves out what they hold back, claims again while it cut jobs that stood ahead of others
        and had room left, and the transaction ends under the claimed tasks' locks (capping.py)."""
        sql = self._sql()
        task_caps = bool(params["cap_tasks"]) and params["limit"] > 0
        if params["queue"] is None:
            statement = sql.COMPLETE_AND_CLAIM_REST_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM_REST
        elif params["cap"] is None:
            statement = sql.COMPLETE_AND_CLAIM_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM
        else:
            statement = (
                sql.COMPLETE_AND_CLAIM_CAPPED_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM_CAPPED
            )
        if params["cap"] is None and not task_caps:
            return self._run_complete_and_claim(statement, params)[:2]
        with transaction.atomic(using=self.connection.alias):
            if params["cap"] is not None:
                self._execute(sql.CAP_LOCK, {"name": f"queue:{params['queue']}"})
            written, jobs, held_back = self._run_complete_and_claim(statement, params)
            taken = len(self._spend_rations(params, jobs))
            # A claim that cut jobs took the first of each task (key) it cut and filled its room, so
            # each round leaves out one more task or key than the last: the rounds end.
            while look_past and held_back and taken and len(jobs) < params["limit"]:
                more = {**params, **_CLAIM_ONLY, "limit": params["limit"] - len(jobs)}
                _, found, held_back = self._run_complete_and_claim(statement, more)
                jobs += self._spend_rations(params, found)
                taken = len(found)
            if task_caps:
                jobs = self._trim_to_task_caps(params["worker_id"], jobs)
            return written, jobs

    def _run_complete_and_claim(
        self, statement: str, params: dict[str, Any]
    ) -> tuple[Written, list[Job], int]:
        """What the completion wrote, the jobs claimed, and the jobs the task caps held back
        (held_back, of the _TASK_CAPS statements; else 0)."""
        result = self._run(statement, params)
        first = result.rows[0]
        written = Written(
            done=frozenset(first[0]), cancelled=frozenset(first[1]), busy=frozenset(first[2]),
            settled=bool(first[3]),
        )  # fmt: skip
        skip = 5 if result.names[4] == "held_back" else 4
        held_back = int(first[4]) if skip == 5 else 0
        jobs = self._build(result.names[skip:], (row[skip:] for row in result.rows if row[skip] is not None))
        return written, jobs, held_back

    def _task_caps(self, rations: Mapping[str, int]) -> dict[str, list[Any]]:
        """The registered capped tasks, and the rate-limited tasks of ``rations`` (task -> permits
        held), as the _TASK_CAPS statements take them; none on an engine without task caps (no job of
        a capped or rate-limited task is ever enqueued there)."""
        if not self._engine().capabilities.task_caps:
            tasks, rations = {}, {}
        else:
            tasks = capped_tasks()
        names = sorted({*tasks, *rations})
        return {
            "cap_tasks": names,
            "cap_most": [tasks[n].max_running if n in tasks else None for n in names],
            "cap_key_most": [tasks[n].max_running_per_key if n in tasks else None for n in names],
            "cap_ration": [rations.get(n) for n in names],
        }

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
