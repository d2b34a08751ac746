"""The state the queue's processes share: workers, maintenance leases, inbound marks, queue state,
rate limits and capped queues' seats."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


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
    supervisor = models.JSONField(
        null=True,
        blank=True,
        help_text="The supervisor that started it (jobq_worker --processes): id, host, pid, started, "
        "processes, restarts, recycled, last exit.",
    )

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


class CapSeat(models.Model):
    """One of a capped queue's seats (JOBQ["QUEUES"][q]["MAX_RUNNING"]): a worker starts a job of the
    queue only in a seat it holds, so no more of its jobs run at once, across every worker, than it has
    seats (those numbered below the cap). A seat is leased like a job: renewed by its holder's
    heartbeat, fenced (each take adds one), and taken over by another worker once its lease ran out."""

    pk = models.CompositePrimaryKey("queue", "seat")
    queue = models.TextField()
    seat = models.IntegerField(help_text="0 .. the cap - 1 (seats at or past a lowered cap are never taken)")
    holder = models.TextField(null=True, blank=True, help_text="The worker holding it (none: free).")
    fence = models.BigIntegerField(
        db_default=0, help_text="Taken this many times: a holder's writes name it."
    )
    lease_until = models.DateTimeField(null=True, blank=True, help_text="Free again after this.")

    class Meta:
        db_table = "jobq_cap_seat"

    def __str__(self) -> str:
        return f"seat {self.seat} of {self.queue}" + (f" held by {self.holder}" if self.holder else "")
