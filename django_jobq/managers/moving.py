"""Moving a queue's PENDING jobs off a database it is no longer on (``manage.py jobq_queue move``):
after JOBQ["QUEUES"][q] places the queue elsewhere, the jobs left behind go where it is now, in
batches, while workers run. Each batch leaves its database in the transaction that writes it to
that database's outbox (under ids reserved where each job goes), and is relayed from there exactly
as an enqueue's outbox is (django_jobq.managers.outbox): never lost, never doubled, whatever stops
between the two commits (the reaper relays what a move did not)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from django.db import transaction

from ..exceptions import JobqError
from ..shards import choose, databases_of_queue, on_shard, placement_key
from .outbox import RELAY_BATCH, OutboxManager

# MOVE_TAKE's columns -> the entry's names
_TAKEN = (
    "id", "task", "queue", "payload", "priority", "run_at", "max_attempts", "concurrency_key", "tags",
    "trace_context", "fairness_key", "attempts", "error_count", "dedupe_key", "dedupe_done", "dedupe_dead",
    "errors", "job_created_at", "last_error", "key_released", "snoozes", "releases", "progress",
)  # fmt: skip
_JSON = (
    "payload",
    "tags",
    "trace_context",
    "errors",
    "progress",
)  # written as JSON text, as an enqueue's are


class Moved(NamedTuple):
    """What a move did: jobs written where they go; dropped (their dedupe key held there: the ids
    they would have had); left waiting in the outbox (their database did not answer); and jobs yet
    to run still on the old database: that stay by rule (of a workflow, awaited) and others (PENDING
    again since, a claim held them)."""

    written: int
    dropped: list[int]
    waiting: int
    stay: int
    other: int


class MoveManager(OutboxManager):
    def move_pending(self, queue: str, source: str, *, batch: int = RELAY_BATCH) -> Moved:
        """Move ``queue``'s PENDING jobs from ``source`` (no longer one of its databases) to its
        databases (a spread queue's by each job's dedupe or concurrency key, else in turn); what
        happened (Moved). A job whose dedupe key is held where it goes (by an active job, or a
        finished one inside its window) is dropped there as that holder's duplicate, and logged."""
        targets = databases_of_queue(queue)
        if source in targets:
            raise JobqError(
                f"queue {queue!r} is on {source!r}: move its jobs off a database it is no longer on"
            )
        if not isinstance(batch, int) or not 1 <= batch <= RELAY_BATCH:
            raise JobqError(f"batch must be between 1 and {RELAY_BATCH}, not {batch!r}")
        taken = waiting = 0
        dropped: list[int] = []
        with on_shard(source):
            while entries := self._move_batch(queue, targets, batch):
                taken += len(entries)
                relayed, left_out = self._relay(entries, None)
                dropped += left_out
                waiting += len(entries) - relayed  # its database did not answer: the reaper relays them
            stay, other = self._execute(self._sql().MOVE_LEFT, {"queue": queue})[0]
        return Moved(taken - waiting - len(dropped), dropped, waiting, int(stay), int(other))

    def _move_batch(self, queue: str, targets: tuple[str, ...], batch: int) -> list[int]:
        """One batch off this database into its outbox, committed; its entries' ids."""
        sql = self._sql()
        with transaction.atomic(using=self.connection.alias):
            rows = [
                dict(zip(_TAKEN, row, strict=True))
                for row in self._execute(sql.MOVE_TAKE, {"queue": queue, "limit": batch})
            ]
            if not rows:
                return []
            placed: dict[str, list[dict[str, Any]]] = {}
            for job in rows:
                key = placement_key(job["dedupe_key"], job["concurrency_key"], None)
                placed.setdefault(choose(targets, key), []).append(job)
            old_ids, job_ids, databases, jobs = [], [], [], []
            for target, group in placed.items():
                with on_shard(target):
                    reserved = self._execute(sql.RESERVE_IDS, {"count": len(group)})[0][0]
                for new_id, job in zip(reserved, group, strict=True):
                    old_ids.append(int(job["id"]))
                    job_ids.append(int(new_id))
                    databases.append(target)
                    jobs.append(json.dumps(_entry(job)))
            self._execute(sql.MOVE_FORWARD, {"old_ids": old_ids, "new_ids": job_ids})  # calls by old ids
            written = {"job_ids": job_ids, "databases": databases, "jobs": jobs}
            return [int(row[0]) for row in self._execute(sql.OUTBOX_WRITE, written)]


def _entry(job: dict[str, Any]) -> dict[str, Any]:
    """A taken job as its outbox entry's JSON (times as ISO text, JSON columns as text)."""
    entry = {name: value for name, value in job.items() if name != "id"}
    for name in _JSON:
        value = entry[name]
        entry[name] = value if value is None or isinstance(value, str) else json.dumps(value)
    for name in ("run_at", "job_created_at"):
        entry[name] = None if entry[name] is None else entry[name].isoformat()
    for name in ("dedupe_done", "dedupe_dead"):
        entry[name] = None if entry[name] is None else float(entry[name])
    return entry
