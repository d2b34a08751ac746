"""The outbox: jobs for a queue on another database, written in the caller's transaction on its own
database and relayed to the queue's database after it commits (django_jobq.managers.outbox)."""

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
