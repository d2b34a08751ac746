"""Schedules and the ticks the scheduler published."""

from __future__ import annotations

from typing import Any

from django.db import models

from ..schedule_checks import clean_schedule


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
