"""Waiting for a job to finish (single-flight's other half): wakes on the completion NOTIFY that the
finishing statement sends for a marked job, with polling as the fallback; works from any process."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql as pgsql
from psycopg.types.string import TextLoader

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob, WaitTimeout
from ..notify.listener import connection_params, listen_params
from ..shards import database_of_job, on_shard
from ..status import FINISHED
from .base import MOVE_HOPS, BaseJobManager

if TYPE_CHECKING:
    from ..models import Job


class WaitingManager(BaseJobManager):
    def wait_for(self, job_id: int, *, timeout: float, poll: float | None = None) -> Job:
        """Block until the job is DONE, DEAD or CANCELLED and return it (``result``, ``last_error``);
        WaitTimeout after ``timeout`` seconds; InvalidJob if there is no such job. Runs on its own
        connection (the caller's transaction is not used: a job enqueued in it cannot finish before
        it commits; nor are the caller's thread's Django connections). ``poll``: seconds between reads when no notification comes (JOBQ["POLL_INTERVAL"])."""
        job_id = validation.integer(job_id, "job id", 1, (1 << 63) - 1)
        timeout = validation.seconds(timeout, "timeout")
        deadline = time.monotonic() + timeout
        for _ in range(MOVE_HOPS + 1):
            with on_shard(database_of_job(job_id)):
                found = self._wait_here(job_id, deadline=deadline, timeout=timeout, poll=poll)
            if not isinstance(found, int):
                return found
            job_id = found  # moved by jobq_queue move: wait for it where it went
        raise InvalidJob(f"there is no job {job_id}")

    def _wait_here(self, job_id: int, *, deadline: float, timeout: float, poll: float | None) -> Job | int:
        """wait_for on the database this context works on; the job's new id when it was moved off
        it (managers/moving.py: read on the wait's own connection, as everything else)."""
        self._engine().capabilities.require("wait_for", "Job.objects.wait_for()")
        conf = jobq_settings()
        poll = conf.poll_interval if poll is None else validation.seconds(poll, "poll")
        statements = self._sql()
        # One connection for the reads (JOBQ["DATABASE"], which may be a pooler: each read is its own
        # transaction) and, unless NOTIFY is off (poll only), one for LISTEN: the same connection
        # when no LISTEN_DATABASE is set, a direct one otherwise.
        params = {**connection_params(conf.database), "application_name": "jobq-wait"}
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(psycopg.connect(**params, autocommit=True))
            listening: psycopg.Connection[Any] | None = None
            if conf.notify:
                listening = conn
                if conf.listen_database is not None:
                    direct = psycopg.connect(**listen_params("jobq-wait"), autocommit=True)
                    listening = stack.enter_context(direct)
                listening.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(conf.done_channel)))
            for json_type in ("json", "jsonb"):  # as text, which the model's JSONFields decode
                conn.adapters.register_loader(json_type, TextLoader)
            conn.execute(statements.WAIT_MARK, self._notify_params(self._common({"id": job_id})))
            while True:
                cursor = conn.execute(statements.JOB_ROW, {"id": job_id})
                row = cursor.fetchone()
                if row is None:
                    if conf.shards and (
                        moved := conn.execute(statements.MOVED_TO, {"ids": [job_id]}).fetchone()
                    ):
                        return int(moved[1])
                    raise InvalidJob(f"there is no job {job_id}")
                job = self._build([column.name for column in cursor.description or ()], [row])[0]
                if job.status in FINISHED:
                    return job
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(f"job {job_id} did not finish within {timeout}s")
                self._notified(listening, str(job_id), min(remaining, max(poll, 0.001)))

    @staticmethod
    def _notified(conn: psycopg.Connection[Any] | None, payload: str, timeout: float) -> None:
        """Return when ``payload`` is notified on ``conn``, or after ``timeout`` seconds (a plain
        sleep when nothing listens)."""
        if conn is None:
            time.sleep(timeout)
            return
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            for notify in conn.notifies(timeout=left, stop_after=1):
                if notify.payload == payload:
                    return
