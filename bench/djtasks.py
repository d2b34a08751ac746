"""Tasks for the systems built on Django's tasks framework (django-jobq's JobqBackend,
django-tasks-db, django-ox)."""

from django.tasks import task

from bench import work


@task
def noop() -> None:
    work.noop()


@task
def sleep() -> None:
    work.sleep()


@task
def latency(key: int) -> None:
    work.record_start(key)


BY_KIND = {"noop": noop, "sleep": sleep, "latency": latency}
