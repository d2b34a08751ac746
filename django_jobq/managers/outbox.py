"""The outbox: an enqueue for a queue on another database (JOBQ["SHARDS"]) made inside a transaction
on a jobq database (the caller's: the order on "default", its job on "jobs2") commits with that
transaction, or not at all.

The job's id is reserved on its queue's database at once (a sequence value: a rolled-back caller
leaves a gap), and the job is written to ``jobq_outbox`` on the caller's database, in the caller's
transaction. Once that commits, the same process relays it (``transaction.on_commit``): the job is
inserted on its database under its reserved id, then the entry is deleted. The reaper of the
outbox's database relays what a process did not (it died, the queue's database was down) once it is
OUTBOX_GRACE_SECONDS old. Exactly once: entries are locked SKIP LOCKED by the relay that takes them,
and a job already written under its id (a relay that died between the two commits) is left alone
(``ON CONFLICT (id) DO NOTHING``), so relaying twice writes it once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from ..conf import on_database
from ..exceptions import ForeignTransaction
from ..shards import on_shard, working_database
from .base import BaseJobManager

logger = logging.getLogger("django_jobq")

OUTBOX_GRACE_SECONDS = 2.0  # the reaper relays entries older than this (their process relays at once)
RELAY_BATCH = 500  # entries one relay statement takes, at most
# a job's columns in its entry -> the name of RELAY_JOBS's array of them
_ARRAYS = {
    "task": "tasks", "queue": "queues", "payload": "payloads", "priority": "priorities", "run_at": "run_ats",
    "max_attempts": "max_attempts", "concurrency_key": "concurrency_keys", "tags": "tags",
    "trace_context": "trace_contexts", "fairness_key": "fairness_keys",
}  # fmt: skip


class OutboxManager(BaseJobManager):
    def _through_outbox(self, source: str, params: dict[str, Any], mode: str) -> tuple[int, dt.datetime]:
        """Write the job of ``params`` to the outbox of ``source`` (the caller's transaction there);
        (its reserved id, the enqueue's time). ForeignTransaction for what the outbox cannot carry:
        a job whose enqueue decides against other jobs at once (a dedupe key, a queue's MAX_DEPTH)."""
        target = params["database"]
        if params["dedupe_key"] is not None or params.get("max_depth") is not None:
            raise ForeignTransaction(
                f"queue {params['queue']!r} is on database {target!r}, and this enqueue runs inside a "
                f"transaction on {source!r}: a job with a dedupe key, or of a queue with a MAX_DEPTH, "
                "is decided on its database at once, which the outbox cannot do. Enqueue it after the "
                f"commit, or inside a transaction on {target!r} (docs/operations/shards.md)"
            )
        now = timezone.now()
        run_at = params["run_at"]
        if params["delay"]:
            run_at = (run_at or now) + dt.timedelta(seconds=params["delay"])
        job = {name: params[name] for name in _ARRAYS}
        job["run_at"] = None if run_at is None else run_at.isoformat()
        return self._to_outbox(source, [(target, job)])[0], now

    def _to_outbox(self, source: str, jobs: list[tuple[str, dict[str, Any]]]) -> list[int]:
        """Write ``jobs`` (each its database and its checked columns) to the outbox of ``source``,
        in the caller's transaction there, each under an id reserved on its database (a statement per
        database); their ids, in order. They are relayed once that transaction commits."""
        ids = [0] * len(jobs)
        by_target: dict[str, list[int]] = defaultdict(list)
        for index, (target, _) in enumerate(jobs):
            by_target[target].append(index)
        for target, indexes in by_target.items():
            with on_shard(target):
                reserved = self._execute(self._sql().RESERVE_IDS, {"count": len(indexes)})[0][0]
            for index, job_id in zip(indexes, reserved, strict=True):
                ids[index] = int(job_id)
        with on_shard(source):
            written = {
                "job_ids": ids,
                "databases": [target for target, _ in jobs],
                "jobs": [json.dumps(job) for _, job in jobs],
            }
            entries = [int(row[0]) for row in self._execute(self._sql().OUTBOX_WRITE, written)]
        transaction.on_commit(lambda: self._relay_committed(source, entries), using=source, robust=True)
        return ids

    def _relay_committed(self, source: str, entries: list[int]) -> None:
        """After the caller's commit: relay its entries now (else the reaper does)."""
        try:
            with on_database(source):
                for start in range(0, len(entries), RELAY_BATCH):
                    self.relay_outbox(entries[start : start + RELAY_BATCH])
        except DatabaseError as exc:
            logger.warning(
                "outbox entries %s on %s: not relayed yet (%s); the reaper relays them",
                entries[:20],
                source,
                exc,
            )

    def relay_outbox(self, ids: list[int] | None = None, *, grace: float | None = None) -> int:
        """Relay entries of the outbox of the database this context works on: those of ``ids``, and
        with ``grace`` those older than ``grace`` seconds, at most RELAY_BATCH; the number relayed.
        An entry whose database cannot be written stays for the next relay."""
        return self._relay(ids, grace)[0]

    def _relay(self, ids: list[int] | None, grace: float | None) -> tuple[int, list[int]]:
        """relay_outbox(); and the ids of the moved jobs left out as duplicates of their key's holder."""
        source = working_database()
        relayed, dropped = 0, []
        with transaction.atomic(using=source):
            params = {"ids": ids or [], "grace": grace, "limit": RELAY_BATCH}
            taken = self._execute(self._sql().OUTBOX_TAKE, params)
            by_target: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
            for row in taken:  # (id, job_id, database, job, created_at)
                by_target[row[2]].append(row)
            done: list[int] = []
            for target, rows in by_target.items():
                try:
                    with on_shard(target):
                        written = self._execute(
                            self._sql().RELAY_JOBS, self._notify_params(_relay_params(rows))
                        )
                        dropped += self._dropped(rows, {int(row[0]) for row in written}, source, target)
                except (DatabaseError, KeyError) as exc:  # KeyError: an alias no longer configured
                    if target in connections.settings:
                        connections[target].close()
                    logger.warning(
                        "outbox of %s: %d job(s) for %s not relayed yet (%s)", source, len(rows), target, exc
                    )
                    continue
                done += [row[0] for row in rows]
                relayed += len(rows)
            if done:
                self._execute(self._sql().OUTBOX_DONE, {"ids": done})
        return relayed, dropped

    def _dropped(self, rows: list[tuple[Any, ...]], written: set[int], source: str, target: str) -> list[int]:
        """The jobs of ``rows`` RELAY_JOBS left out that are not on ``target`` either (a relay
        before wrote the others): moved jobs whose dedupe key is held there. Logged."""
        missing = [int(row[1]) for row in rows if int(row[1]) not in written]
        if not missing:
            return []
        there = {int(row[0]) for row in self._execute(self._sql().JOBS_PRESENT, {"ids": missing})}
        dropped = [job_id for job_id in missing if job_id not in there]
        if dropped:
            logger.warning(
                "outbox of %s: %d moved job(s) not written on %s, their dedupe key held there by "
                "another job (its duplicate): %s", source, len(dropped), target, dropped[:20],
            )  # fmt: skip
        return dropped


# what a moved job (django_jobq.managers.moving) carries besides: its entry's name -> RELAY_JOBS's array
MOVED = {
    "attempts": "attempts", "error_count": "error_counts", "dedupe_key": "dedupe_keys",
    "dedupe_done": "dedupe_dones", "dedupe_dead": "dedupe_deads", "errors": "errors",
    "job_created_at": "job_created_ats", "last_error": "last_errors", "key_released": "key_releaseds",
    "snoozes": "snoozes", "releases": "releases", "progress": "progresses",
}  # fmt: skip


def _relay_params(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """RELAY_JOBS's arrays from outbox rows (id, job_id, database, job, created_at)."""
    jobs = [row[3] if isinstance(row[3], dict) else json.loads(row[3]) for row in rows]
    names = {**_ARRAYS, **MOVED}
    params: dict[str, Any] = {array: [job.get(name) for job in jobs] for name, array in names.items()}
    for times in ("run_ats", "job_created_ats"):
        params[times] = [None if at is None else dt.datetime.fromisoformat(at) for at in params[times]]
    params["ids"] = [int(row[1]) for row in rows]
    params["created_ats"] = [row[4] for row in rows]
    return params
