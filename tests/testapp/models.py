from django.db import models
from django.db.models.functions import Now


class Execution(models.Model):
    """One row per time a test task body ran (to count executions across worker processes)."""

    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    fence = models.BigIntegerField(default=0)
    worker_id = models.TextField()
    ran_at = models.DateTimeField(null=True)  # when the body started (the host clock)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} on {self.worker_id}"


class Ledger(models.Model):
    """One row per run of a reliability task, stamped on the database clock as the run starts."""

    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    fence = models.BigIntegerField()
    worker_id = models.TextField()
    at = models.DateTimeField(db_default=Now())

    class Meta:
        app_label = "testapp"
        indexes = [models.Index(fields=["job_id", "fence"], name="testapp_ledger_job")]

    def __str__(self) -> str:
        return f"job {self.job_id} fence {self.fence} on {self.worker_id}"
