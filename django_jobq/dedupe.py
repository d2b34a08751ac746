"""Inbound delivery dedupe: process a webhook (or any at-least-once delivery) once per window.

``first_seen(namespace, key, ttl)`` is True for exactly one caller per (namespace, key) per window of
``ttl`` seconds, across threads, processes and hosts: the database decides in one statement
(FIRST_SEEN). The mark is written in the caller's transaction on the queue's database
(JOBQ["DATABASE"]), so a handler that rolls back leaves no mark and the delivery can be retried.
Marks live in their own table (jobq_inbound), apart from job dedupe keys; the reaper deletes expired
ones (prune_expired_marks). See docs/inbound-dedupe.md.
"""

from __future__ import annotations

import datetime as dt

from asgiref.sync import sync_to_async

from . import validation
from .conf import jobq_settings
from .models import Job

MAX_MARK_BATCHES = 4  # prune statements per reaper pass; the next pass goes on


def first_seen(namespace: str, key: str, ttl: float | dt.timedelta) -> bool:
    """Whether this is the first delivery of ``key`` in ``namespace`` within ``ttl`` seconds; marks it
    seen. Raises InvalidJob for a bad argument before anything is written."""
    params = {
        "namespace": validation.inbound_namespace(namespace),
        "key": validation.inbound_key(key),
        "ttl": validation.ttl(ttl),
    }
    return bool(Job.objects._execute(Job.objects._sql().FIRST_SEEN, params))


async def afirst_seen(namespace: str, key: str, ttl: float | dt.timedelta) -> bool:
    """first_seen from async code (in the thread that holds the sync code's connection)."""
    return await sync_to_async(first_seen)(namespace, key, ttl)


def prune_expired_marks(batch: int | None = None) -> int:
    """Delete expired marks, ``batch`` (JOBQ["PRUNE_BATCH"]) per statement, at most MAX_MARK_BATCHES
    statements; how many were deleted."""
    size = jobq_settings().prune_batch if batch is None else validation.integer(batch, "batch", 1, 1_000_000)
    sql = Job.objects._sql().PRUNE_MARKS
    total = 0
    for _ in range(MAX_MARK_BATCHES):
        deleted = Job.objects._rowcount(sql, {"batch": size})
        total += deleted
        if deleted < size:
            break
    return total
