"""JobContext: what a task with ``takes_context=True`` receives as its first argument."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, kw_only=True)
class JobContext:
    job_id: int
    task: str
    attempt: int
    max_attempts: int
    worker_id: str

    def set_progress(self, done: float, total: float | None = None) -> bool:
        """Record progress (shown by the admin); False if this worker no longer owns the job."""
        from .models import Job

        return Job.objects.set_progress(self.job_id, self.worker_id, self.attempt, done, total)

    def renew_lease(self, lease_seconds: float | None = None) -> bool:
        """Extend the lease beyond the heartbeat's; False if this worker no longer owns the job."""
        from .models import Job

        return Job.objects.renew_lease(self.job_id, self.worker_id, lease_seconds, attempt=self.attempt)
