"""A bulk action of the console: an action over every job an admin filter selects, run in batches by
a job of the queue itself (django_jobq.console.bulk), its progress here."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class BulkAction(models.Model):
    """One "select all matching" action: what it does, over which selection, how far it got."""

    class Kind(models.TextChoices):
        REQUEUE = "requeue", "requeue"
        CANCEL = "cancel", "cancel"
        DELETE = "delete", "delete"

    class State(models.TextChoices):
        RUNNING = "running", "running"
        DONE = "done", "done"
        CANCELLED = "cancelled", "cancelled"

    action = models.CharField(max_length=16, choices=Kind.choices)
    selection = models.JSONField(help_text="The jobs it acts on (console.selection.Selection).")
    options = models.JSONField(default=dict, blank=True, help_text="requeue: run_at, priority, spread.")
    query = models.TextField(
        blank=True, help_text="The list's filter (its query string) it was started from."
    )
    total = models.BigIntegerField(help_text="Jobs the selection held when the operator confirmed.")
    done = models.BigIntegerField(default=0, help_text="Jobs acted on so far.")
    skipped = models.BigIntegerField(
        default=0, help_text="Jobs of the selection left as they were (changed meanwhile, locked or gone)."
    )
    cursor = models.BigIntegerField(default=0, help_text="The highest job id a committed batch went through.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.TextField()
    job_id = models.BigIntegerField(null=True, blank=True, help_text="The job that runs it.")
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobq_bulk_action"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"bulk {self.action} #{self.pk}"
