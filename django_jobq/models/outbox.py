"""The outbox: jobs for a queue on another database, written in the caller's transaction on its own
database and relayed to the queue's database after it commits (django_jobq.managers.outbox); and
where moved jobs went (django_jobq.managers.moving)."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class OutboxEntry(models.Model):
    """One job waiting to be relayed to its queue's database, under the id reserved for it there."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(help_text="the id reserved for the job on its database")
    database = models.TextField(help_text="the alias of the job's queue's database")
    job = models.JSONField(help_text="the job's checked columns, as enqueue wrote them")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "jobq_outbox"
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox"

    def __str__(self) -> str:
        return f"job {self.job_id} for {self.database}"


class MovedJob(models.Model):
    """A job that ``jobq_queue move`` took off this database: the id it has where it went (its
    database is the one that id names), so that calls by its old id find it."""

    old_id = models.BigIntegerField(primary_key=True, help_text="the job's id on this database")
    new_id = models.BigIntegerField(help_text="its id on the database it was moved to")
    moved_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "jobq_moved"
        verbose_name = "moved job"

    def __str__(self) -> str:
        return f"job {self.old_id}, now {self.new_id}"
