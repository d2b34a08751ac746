"""Claiming jobs: claim, claim_batch, and complete_and_claim (a lane's write of its successes and its
next claim in one statement), within the queues' and the tasks' caps."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import Error as DatabaseError
from django.db import transaction

from .. import fairness, validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..registry import capped_tasks
from .capping import CapManager
from .written import Written

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobq")

# A complete_and_claim statement's parameters that make it claim only.
_CLAIM_ONLY: dict[str, Any] = {"ids": [], "fences": [], "results": []}


class ClaimManager(CapManager):
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
            fair = jobq_settings().fair_queues().get(names[0]) if len(names) == 1 else None
            if fair is not None:
                statement = sql.CLAIM_FAIR
                params.update(fairness.claim_params(names[0], fair))
        return self._jobs(statement, params)

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
        seated: Mapping[str, int] | None = None,
        seated_tasks: Mapping[str, int] | None = None,
    ) -> tuple[Written, list[Job]]:
        """complete_many and claim_batch for one queue (or, with ``queue=None``, every queue but
        ``exclude``) in a single statement (one commit). A queue with JOBQ["QUEUES"][q]["MAX_RUNNING"]
        is claimed from under that cap, across every worker (claim and claim_batch ignore caps).
        When a task cap cut the claim short, it claims again for the jobs behind those held back
        unless ``look_past`` is False (that reads the held-back jobs: the worker does it at most
        every LOOK_PAST_SECONDS while it finds nothing there). ``rations``: queues of which it claims
        no more than that many jobs (the rate-limit permits the worker holds for them), each apart.
        ``task_rations``: rate-limited tasks of which it claims no more than that many jobs in all
        (none at 0), by the pick, as it keeps to task caps. ``seated``: capped queues whose seats the
        caller holds (worker/seats.py): each claimed with no more than that many jobs, apart, without
        the cap's lock and count (the caller starts their jobs only in its seats). ``seated_tasks``:
        likewise, capped tasks (@task(max_running=N)) of which it claims no more than that many jobs in
        all, without counting their RUNNING jobs (their per-key caps still apply).

        Returns what the completion wrote (Written) and the jobs claimed (``limit`` may be 0)."""
        ids, fences, results = (list(c) for c in zip(*done, strict=True)) if done else ([], [], [])
        params: dict[str, Any] = {
            "worker_id": worker_id, "ids": ids, "fences": fences, "results": results,
            "limit": validation.integer(limit, "limit", 0, 100_000), "queue": queue,
            "lease": self._lease(lease_seconds), "exclude": list(exclude), "cap": None,
        }  # fmt: skip
        params.update(self._task_caps(task_rations or {}, self._seated_counts(seated_tasks, "task")))
        conf = jobq_settings()
        seated = self._seated_counts(seated, "queue")
        caps = {name: cap for name, cap in conf.caps().items() if name not in seated}
        fair, rations = conf.fair_queues(), dict(rations or {})
        for name, most in seated.items():  # a seated queue is claimed apart, as a rationed one
            rations[name] = min(most, rations.get(name, most))
        if queue is not None:
            limit = min(params["limit"], rations.get(queue, limit))
            one = {**params, "cap": caps.get(queue), "limit": limit, **self._fair(queue, fair)}
            return self._complete_and_claim(one, look_past)
        # The "*" lane: each rationed queue apart, at most its ration; then every other uncapped, unfair
        # queue in one statement (which also writes the completions); then each capped or fair one it
        # serves.
        jobs: list[Job] = []
        for name, most in sorted(rations.items()):
            if most > 0 and len(jobs) < limit:
                more = {
                    **params,
                    **_CLAIM_ONLY,
                    "queue": name,
                    "cap": caps.get(name),
                    **self._fair(name, fair),
                }
                found = self._complete_and_claim({**more, "limit": min(most, limit - len(jobs))}, look_past)[
                    1
                ]
                jobs += self._spend_rations(params, found)
        params["exclude"] = [*exclude, *caps, *fair, *rations]
        written, found = self._complete_and_claim({**params, "limit": limit - len(jobs)}, look_past)
        jobs += self._spend_rations(params, found)
        for name in sorted({*caps, *fair} - set(exclude) - set(rations)):
            if len(jobs) >= limit:
                break
            more = {**params, **_CLAIM_ONLY, "queue": name, "cap": caps.get(name), **self._fair(name, fair)}
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
        if params.get("fair_weight") is not None:
            statement = (
                (sql.COMPLETE_AND_CLAIM_FAIR_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM_FAIR)
                if params["cap"] is None
                else (
                    sql.COMPLETE_AND_CLAIM_FAIR_CAPPED_TASK_CAPS
                    if task_caps
                    else sql.COMPLETE_AND_CLAIM_FAIR_CAPPED
                )
            )
        elif params["queue"] is None:
            statement = sql.COMPLETE_AND_CLAIM_REST_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM_REST
        elif params["cap"] is None:
            statement = sql.COMPLETE_AND_CLAIM_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM
        else:
            statement = (
                sql.COMPLETE_AND_CLAIM_CAPPED_TASK_CAPS if task_caps else sql.COMPLETE_AND_CLAIM_CAPPED
            )
        counted = {  # the caps this claim counts (not a seated task's max_running): settled below
            name: (most, key_most)
            for name, most, key_most in zip(
                params["cap_tasks"], params["cap_most"], params["cap_key_most"], strict=True
            )
            if most is not None or key_most is not None
        }
        trim = task_caps and bool(counted)
        if params["cap"] is None and not task_caps:
            return self._run_complete_and_claim(statement, params)[:2]
        atomic = params["cap"] is not None or trim  # the locks below last until the claim commits
        with transaction.atomic(using=self.connection.alias) if atomic else contextlib.nullcontext():
            if params["cap"] is not None:
                self._execute(sql.CAP_LOCK, {"name": f"queue:{params['queue']}"})
            written, jobs, held_back = self._run_complete_and_claim(statement, params)
            taken = len(self._spend_rations(params, jobs))
            # A claim that cut jobs took the first of each task (key) it cut and filled its room, so
            # each round leaves out one more task or key than the last: the rounds end.
            while look_past and held_back and taken and len(jobs) < params["limit"]:
                more = {**params, **_CLAIM_ONLY, "limit": params["limit"] - len(jobs)}
                try:
                    _, found, held_back = self._run_complete_and_claim(statement, more)
                except DatabaseError:
                    if atomic:  # rolls back the rounds before: nothing was claimed
                        raise
                    # Without a transaction the rounds before have committed: their jobs are this
                    # worker's, and go to it (they would otherwise wait out their leases).
                    logger.warning("a further claim round failed; keeping the %d job(s) claimed", len(jobs),
                                   exc_info=True)  # fmt: skip
                    break
                jobs += self._spend_rations(params, found)
                taken = len(found)
            if trim:
                jobs = self._trim_to_task_caps(params["worker_id"], jobs, counted)
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

    @staticmethod
    def _fair(queue: str, fair: Mapping[str, fairness.FairOptions]) -> dict[str, Any]:
        """The fair claim's parameters when ``queue`` is fair (else none: the plain claim)."""
        options = fair.get(queue)
        return {} if options is None else fairness.claim_params(queue, options)

    def _task_caps(self, rations: Mapping[str, int], seated: Mapping[str, int]) -> dict[str, Any]:
        """The registered capped tasks, and the rate-limited tasks of ``rations`` (task -> permits
        held), as the _TASK_CAPS statements take them; none on an engine without task caps (no job of
        a capped or rate-limited task is ever enqueued there). A task of ``seated`` (task -> jobs its
        seats leave room for) is claimed up to that many, its max_running not counted (cap_most NULL)."""
        if not self._engine().capabilities.task_caps:
            tasks, rations, seated = {}, {}, {}
        else:
            tasks = capped_tasks()
        names = sorted({*tasks, *rations, *seated})
        most = {n: tasks[n].max_running for n in tasks if n not in seated}
        key_most = {n: tasks[n].max_running_per_key for n in tasks}
        ration = {
            n: min(r for r in (rations.get(n), seated.get(n)) if r is not None) for n in {*rations, *seated}
        }
        return {
            "cap_tasks": names,
            "cap_most": [most.get(n) for n in names],
            "cap_key_most": [key_most.get(n) for n in names],
            "cap_ration": [ration.get(n) for n in names],
        }

    @staticmethod
    def _seated_counts(seated: Mapping[str, int] | None, what: str) -> dict[str, int]:
        """``seated`` (a queue or task name -> jobs its seats leave room for), checked."""
        check = validation.queue if what == "queue" else functools.partial(validation.name, what="task")
        return {
            check(name): validation.integer(most, "seated", 0, 1 << 30)
            for name, most in (seated or {}).items()
        }
