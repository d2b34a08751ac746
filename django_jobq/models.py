"""The job table. Models are the only source of schema; SQL lives in django_jobq.sql."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Now

from .managers import JobManager
from .schedule_checks import clean_schedule
from .status import JobStatus as JobStatus  # django_jobq.models.JobStatus, as documented


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
    errors = models.JSONField(default=list, blank=True, help_text="The latest failed attempts, oldest first.")
    progress = models.JSONField(null=True, blank=True)
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
            # dead letters: DEAD counts per queue (index-only) and the dead-letter list, filtered by task.
            # Partial, so its size follows the dead letters kept, never the DONE history.
            models.Index(
                fields=["queue", "task"], condition=models.Q(status=JobStatus.DEAD), name="jobq_job_dead"
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


class WorkerRecord(models.Model):
    """One row per worker process, written by its heartbeat; shows who is alive and what it serves."""

    worker_id = models.TextField(primary_key=True)
    hostname = models.TextField()
    pid = models.IntegerField()
    lanes = models.JSONField(default=dict, help_text="queue name -> slots")
    running = models.IntegerField(default=0, help_text="jobs running at the last heartbeat")
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)
    stuck = models.JSONField(default=dict, help_text="queue name -> slots stuck in a job past its timeout")

    class Meta:
        db_table = "jobq_worker"
        ordering = ["-last_seen_at"]
        indexes = [models.Index(fields=["last_seen_at"], name="jobq_worker_seen")]  # "seen recently"

    def __str__(self) -> str:
        return self.worker_id


class MaintenanceLease(models.Model):
    """Which process acts for a maintenance role (the reaper) and until when; renewed while it acts,
    taken over by another once expired. A row with an expiry works through any pooler, unlike a
    session-level advisory lock, and a holder that hangs or vanishes loses it on time."""

    name = models.TextField(primary_key=True)
    holder = models.TextField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "jobq_lease"

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder}"


class DeadJob(Job):
    """DEAD jobs only: the admin's dead-letter view (a proxy; same table, same permissions as Job)."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class InboundMark(models.Model):
    """An inbound delivery seen (a webhook's event id in its namespace): the pair is taken until
    expires_at. django_jobq.dedupe.first_seen writes it; the reaper deletes expired marks."""

    # The primary key is the pair itself: the one unique index first_seen's ON CONFLICT needs, and no
    # surrogate id with a second index to maintain on every delivery.
    pk = models.CompositePrimaryKey("namespace", "key")
    namespace = models.TextField()
    key = models.TextField()
    seen_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "jobq_inbound"
        indexes = [models.Index(fields=["expires_at"], name="jobq_inbound_expires")]  # prune: expired first

    def __str__(self) -> str:
        return f"{self.namespace}:{self.key} until {self.expires_at}"


class QueueState(models.Model):
    """State of one queue that every worker shares, kept in the database so that it holds across all
    workers and restarts: whether the queue is paused (its jobs are not claimed) and who changed it
    last; and the depth baseline that enqueue's MAX_DEPTH check starts from (refreshed by the reaper
    for every queue with a MAX_DEPTH). A queue without a row has the defaults: not paused."""

    name = models.TextField(primary_key=True)
    paused = models.BooleanField(db_default=False, help_text="Workers claim nothing from a paused queue.")
    changed_at = models.DateTimeField(db_default=Now())
    changed_by = models.TextField(
        null=True, blank=True, help_text='Who changed it: a username, "manage.py jobq_queue" or "api".'
    )
    depth_count = models.BigIntegerField(null=True, help_text="PENDING jobs counted at depth_at.")
    depth_seq = models.BigIntegerField(
        null=True, help_text="jobq_job's id sequence read just before that count."
    )
    depth_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "jobq_queue"
        ordering = ["name"]
        verbose_name = "queue state"

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused else 'running'})"


class RateBucket(models.Model):
    """A token bucket's state per key (django_jobq.ratelimit.TokenBucket). The bucket's size and refill
    rate are not stored: every acquire brings its own, so a changed limit applies at once."""

    key = models.TextField(primary_key=True)
    tokens = models.FloatField(help_text="tokens left at updated_at")
    updated_at = models.DateTimeField(help_text="when tokens was computed (the database clock)")
    idle_at = models.DateTimeField(help_text="when the bucket is full again (prunable)")
    rest_at = models.DateTimeField(help_text="idle_at rounded up to a whole step: pruned from then on")

    class Meta:
        db_table = "jobq_rate_bucket"
        # prune: the rows whose step has ended (rest_at changes once a step at most: acquires stay HOT)
        indexes = [models.Index(fields=["rest_at"], name="jobq_rate_bucket_rest")]

    def __str__(self) -> str:
        return f"token bucket {self.key}"


class RateWindow(models.Model):
    """A sliding window's log per key (django_jobq.ratelimit.SlidingWindow): the times of the permits
    granted within the last window, as epoch microseconds on the database clock."""

    key = models.TextField(primary_key=True)
    stamps = models.JSONField(default=list, help_text="epoch microseconds of the live permits")
    idle_at = models.DateTimeField(help_text="when the newest permit leaves the window (prunable)")
    rest_at = models.DateTimeField(help_text="idle_at rounded up to a whole step: pruned from then on")

    class Meta:
        db_table = "jobq_rate_window"
        indexes = [models.Index(fields=["rest_at"], name="jobq_rate_window_rest")]  # as RateBucket's

    def __str__(self) -> str:
        return f"sliding window {self.key}"


class ScheduleSource(models.TextChoices):
    SETTINGS = "settings"  # defined in JOBQ["SCHEDULES"]: synced at the scheduler's start-up, read-only
    ADMIN = "admin"  # defined in the admin (or in code): edited there


class Schedule(models.Model):
    """A schedule: publish a job of ``task`` at every tick of a cron expression or a daily time, read
    on the wall clock of an IANA zone. The scheduler (django_jobq.scheduler) publishes each tick once."""

    name = models.CharField(max_length=100, unique=True)
    task = models.CharField(max_length=200, help_text="A registered task's name.")
    payload = models.JSONField(default=dict, blank=True, help_text="The job's arguments (a JSON object).")
    queue = models.CharField(max_length=200, null=True, blank=True, help_text="Empty: the task's queue.")
    priority = models.SmallIntegerField(null=True, blank=True, help_text="Empty: the task's priority.")
    cron = models.CharField(
        max_length=200, null=True, blank=True, help_text='A 5-field cron expression, e.g. "30 2 * * *".'
    )
    at = models.CharField(max_length=5, null=True, blank=True, help_text='A daily time, "HH:MM".')
    timezone = models.CharField(
        max_length=64,
        null=True,
        blank=True,
        help_text='IANA zone, e.g. "Europe/Berlin". Empty: JOBQ["TIMEZONE"], then TIME_ZONE.',
    )
    enabled = models.BooleanField(default=True)
    missed = models.CharField(
        max_length=20, default="skip", help_text='Missed ticks: "skip", "latest" or "backfill:N".'
    )
    next_run_at = models.DateTimeField(
        null=True, blank=True, help_text="The next tick; empty: computed by the scheduler's next pass."
    )
    last_tick_at = models.DateTimeField(null=True, blank=True, help_text="The last tick published.")
    source = models.CharField(max_length=10, choices=ScheduleSource.choices, default=ScheduleSource.ADMIN)

    class Meta:
        db_table = "jobq_schedule"
        ordering = ["name"]
        permissions = [("run_schedule", "Can run schedules now")]
        indexes = [
            # a pass: WHERE enabled AND (next_run_at IS NULL OR next_run_at <= now) ORDER BY next_run_at.
            models.Index(fields=["next_run_at"], condition=models.Q(enabled=True), name="jobq_schedule_due"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(cron__isnull=False, at__isnull=True)
                | models.Q(cron__isnull=True, at__isnull=False),
                name="jobq_schedule_cron_or_at",
                violation_error_message='Give either a cron expression or a daily "HH:MM" time, not both.',
            ),
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded = self._timing()  # as built or loaded: save() compares

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the definition. next_run_at and last_tick_at belong to the scheduler: an update leaves
        them alone (a form loaded before a pass never moves a tick back), except that a changed spec,
        zone or enabled flag clears next_run_at, so the schedule restarts from its next tick after now."""
        restart = self._loaded != self._timing()
        if restart:
            self.next_run_at = None
        fields = kwargs.get("update_fields")
        if not self._state.adding and fields is None and not kwargs.get("force_insert"):
            owned = {"id", "last_tick_at"} | (set() if restart else {"next_run_at"})
            kwargs["update_fields"] = [f.name for f in self._meta.concrete_fields if f.name not in owned]
        elif restart and fields is not None:
            kwargs["update_fields"] = {*fields, "next_run_at"}
        super().save(*args, **kwargs)
        self._loaded = self._timing()

    def clean(self) -> None:
        clean_schedule(self)

    @property
    def spec(self) -> str:
        """The cron expression or the daily time, whichever the schedule has."""
        return self.cron or self.at or ""

    def _timing(self) -> tuple[Any, ...]:
        return (self.cron, self.at, self.timezone, self.enabled)


class ScheduleTick(models.Model):
    """A tick published: the database refuses a second row for the same (schedule, tick), so however
    many scheduler replicas run, each tick becomes at most one job."""

    # The pair is the primary key: the one unique index the scheduler's ON CONFLICT needs.
    pk = models.CompositePrimaryKey("schedule", "tick")
    schedule = models.CharField(max_length=100, help_text="The schedule's name (kept if it is deleted).")
    tick = models.DateTimeField()
    job_id = models.BigIntegerField(null=True, help_text="The job published (None: its key was taken).")
    published_at = models.DateTimeField()

    class Meta:
        db_table = "jobq_schedule_tick"

    def __str__(self) -> str:
        return f"{self.schedule} at {self.tick.isoformat()}"
