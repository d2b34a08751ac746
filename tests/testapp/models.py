from django.db import models


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
