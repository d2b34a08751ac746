"""The job table: a job, its indexes, and the dead-letter proxy the admin lists."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Now

from ..managers import JobManager
from ..status import JobStatus


class ContainmentIndex(models.Index):
    """A GIN index on PostgreSQL (with the index's opclasses, e.g. jsonb_path_ops: containment,
    ``@>``), a plain one elsewhere (SQLite ignores opclasses). Unlike django.contrib.postgres's
    GinIndex, it needs no app installed and migrates on either engine."""

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if schema_editor.connection.vendor == "postgresql":
            using = " USING gin"
        return super().create_sql(model, schema_editor, using=using, **kwargs)


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.TextField()
    queue = models.TextField(default="default")
    payload = models.JSONField(default=dict)
    status = models.SmallIntegerField(choices=JobStatus.choices, default=JobStatus.PENDING)
    priority = models.SmallIntegerField(default=100, help_text="Lower runs first.")
    run_at = models.DateTimeField(db_default=Now())
    attempts = models.IntegerField(default=0, help_text="Attempts used of max_attempts; reset by a requeue.")
    max_attempts = models.IntegerField(default=5)
    fence = models.BigIntegerField(
        db_default=0, help_text="Fencing token: grows with every claim and in-slot retry, never reset."
    )
    releases = models.IntegerField(db_default=0, help_text="Times a stopping worker gave the job back.")
    snoozes = models.IntegerField(
        db_default=0, help_text='Times its task raised Snooze (JOBQ["MAX_SNOOZES"]).'
    )
    error_count = models.IntegerField(
        db_default=0, help_text="Failed attempts ever; errors keeps the last few."
    )
    worker_id = models.TextField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    dedupe_key = models.TextField(null=True, blank=True)
    concurrency_key = models.TextField(
        null=True, blank=True, help_text="Jobs of a task with max_running_per_key share a cap per key."
    )
    fairness_key = models.TextField(
        null=True,
        blank=True,
        help_text='In a fair queue (JOBQ["QUEUES"][q]["FAIR"]), jobs are served round-robin by this key.',
    )
    dedupe_done = models.DurationField(
        null=True, blank=True, help_text="How long the dedupe key stays taken after DONE."
    )
    dedupe_dead = models.DurationField(
        null=True, blank=True, help_text="How long the dedupe key stays taken after DEAD."
    )
    key_released = models.BooleanField(
        db_default=False, help_text="The dedupe key has passed to a newer job (or was never held)."
    )
    awaited = models.BooleanField(
        db_default=False, help_text="A wait_for() caller wants a completion NOTIFY."
    )
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a cancel was asked of the job; a run it reaches ends CANCELLED.",
    )
    cancelled_by = models.TextField(null=True, blank=True, help_text="Who asked for the cancel.")
    tags = models.JSONField(
        null=True, blank=True, help_text='Labels to find the job by (enqueue(tags=["tenant:42"])).'
    )
    trace_context = models.JSONField(
        null=True,
        blank=True,
        help_text="The trace context of the enqueue (OpenTelemetry), for the run's span.",
    )
    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    exception = models.TextField(
        null=True,
        blank=True,
        help_text="What killed a DEAD job: its exception's class (or 'lease expired'), written when it died.",
    )
    errors = models.JSONField(default=list, blank=True, help_text="The latest failed attempts, oldest first.")
    progress = models.JSONField(null=True, blank=True)
    workflow_id = models.BigIntegerField(
        null=True, blank=True, help_text="The workflow (chain or group) the job belongs to."
    )
    waiting_on = models.IntegerField(
        db_default=0, help_text="Dependencies not finished yet (a WAITING job becomes PENDING at 0)."
    )
    has_dependents = models.BooleanField(
        db_default=False, help_text="Other jobs depend on this one (its end settles them)."
    )
    dependency_failure = models.TextField(
        null=True,
        blank=True,
        help_text='A job with dependencies: "cancel" (when one ends DEAD or CANCELLED) or "run" (anyway).',
    )
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobManager()

    class Meta:
        db_table = "jobq_job"
        ordering = ["-id"]
        permissions = [
            ("requeue_job", "Can requeue dead jobs"),
            ("pause_queue", "Can pause and resume queues"),
            ("cancel_job", "Can cancel queued and running jobs"),
        ]
        indexes = [
            # claim: WHERE status=PENDING AND queue=… AND run_at<=now ORDER BY priority, run_at, id LIMIT n.
            # Partial, so its size follows the backlog, never the finished history.
            models.Index(
                fields=["queue", "priority", "run_at", "id"],
                condition=models.Q(status=JobStatus.PENDING),
                name="jobq_job_claim",
            ),
            # a fair queue's claim: per key of a priority lane, its due jobs in (run_at, id) order.
            # Partial (PENDING jobs with a fairness key): unfair queues never write it.
            models.Index(
                fields=["queue", "fairness_key", "priority", "run_at", "id"],
                condition=models.Q(status=JobStatus.PENDING, fairness_key__isnull=False),
                name="jobq_job_fair",
            ),
            # reap: WHERE status=RUNNING AND lease_until < now.
            models.Index(
                fields=["lease_until"], condition=models.Q(status=JobStatus.RUNNING), name="jobq_job_lease"
            ),
            # prune: WHERE status=DONE|DEAD|CANCELLED AND finished_at < cutoff, the old rows one range, their status
            # checked in the index; recent-throughput figures per queue (finished_at > since) and exact
            # DONE counts, index-only (queue included). finished_at leads so that the planner sees its
            # correlation with the table's order. Partial on the terminal statuses: enqueue and claim
            # never write it.
            models.Index(
                fields=["finished_at", "status"],
                include=["queue"],
                condition=models.Q(status__in=[JobStatus.DONE, JobStatus.DEAD, JobStatus.CANCELLED]),
                name="jobq_job_finished",
            ),
            # dead letters: DEAD counts per queue (index-only), the dead-letter list filtered by task, and
            # its groups per task and exception (index-only). Partial, so its size follows the dead
            # letters kept, never the DONE history.
            models.Index(
                fields=["queue", "task", "exception"],
                condition=models.Q(status=JobStatus.DEAD),
                include=["finished_at"],  # the groups' last death, read from the index alone
                name="jobq_job_dead",
            ),
            # cancelled jobs: the admin's list of them, newest first, and their counts per queue
            # (index-only). Partial: written only when a job ends CANCELLED, so its size follows the
            # cancelled jobs kept.
            models.Index(
                fields=["id"],
                include=["queue"],
                condition=models.Q(status=JobStatus.CANCELLED),
                name="jobq_job_cancelled",
            ),
            # waiting jobs: counts per queue (the dashboard, jobq_stats), index-only. Partial: only jobs
            # held for their dependencies are in it.
            models.Index(
                fields=["queue"], condition=models.Q(status=JobStatus.WAITING), name="jobq_job_waiting"
            ),
            # workflows: a workflow's jobs (its page, its status, wait and cancel) and "is any of them
            # unfinished" (prune keeps a workflow's rows together). Partial: jobs outside workflows
            # cost it nothing.
            models.Index(
                fields=["workflow_id", "status"],
                condition=models.Q(workflow_id__isnull=False),
                name="jobq_job_workflow",
            ),
            # tags: WHERE tags @> '["tenant:42"]' (cancel_many, the admin). Partial: untagged jobs, the
            # common case, cost it nothing; jsonb_path_ops keeps it small (containment is all it serves).
            ContainmentIndex(
                fields=["tags"],
                opclasses=["jsonb_path_ops"],
                condition=models.Q(tags__isnull=False),
                name="jobq_job_tags",
            ),
        ]
        constraints = [
            # dedupe: at most one job holds each key: the active one, or the last finished one until the
            # next enqueue of the key finds its window over and releases it (key_released). Enqueue uses
            # ON CONFLICT on it; jobs without a key are left out, so they cost this index nothing.
            models.UniqueConstraint(
                fields=["dedupe_key"],
                condition=models.Q(dedupe_key__isnull=False, key_released=False),
                name="jobq_job_dedupe",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.id} {self.task} ({self.get_status_display()})"


class DeadJob(Job):
    """DEAD jobs only: the admin's dead-letter view (a proxy; same table, same permissions as Job)."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"
