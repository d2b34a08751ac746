"""Workflows: the edges between jobs and the workflow each group of jobs belongs to."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class Dependency(models.Model):
    """An edge of a workflow: ``dependent_id`` waits for ``dependency_id``. ``resolved`` turns true in
    the transaction that finishes the dependency (a database trigger, migration 0009), together with
    the dependent's ``waiting_on`` count, so a dependent's count always equals its unresolved edges."""

    pk = models.CompositePrimaryKey("dependent_id", "dependency_id")
    dependent_id = models.BigIntegerField()
    dependency_id = models.BigIntegerField()
    resolved = models.BooleanField(db_default=False)

    class Meta:
        db_table = "jobq_dependency"
        indexes = [
            # a job's dependents (requeue's revival, the workflow page)
            models.Index(fields=["dependency_id"], name="jobq_dependency_of"),
            # the dependents a job's end settles (the trigger). Partial: settled edges leave it.
            models.Index(
                fields=["dependency_id"], condition=models.Q(resolved=False), name="jobq_dependency_open"
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.dependent_id} after job {self.dependency_id}"


class Workflow(models.Model):
    """A group of jobs enqueued together by django_jobq.workflows (a chain, a group, a graph)."""

    id = models.BigAutoField(primary_key=True)
    name = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "jobq_workflow"
        ordering = ["-id"]
        indexes = [models.Index(fields=["created_at"], name="jobq_workflow_created")]  # prune

    def __str__(self) -> str:
        return f"workflow {self.id}" + (f" {self.name}" if self.name else "")
