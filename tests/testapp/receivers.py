"""A signal receiver that raises for jobs that ask it to (a hostile receiver in every process)."""

from django.dispatch import receiver

from django_jobq import signals


@receiver(signals.job_succeeded)
@receiver(signals.job_started)
def explode_when_asked(job, **kwargs):
    if isinstance(job.payload, dict) and job.payload.get("explode_receiver"):
        raise RuntimeError("a receiver that raises")
