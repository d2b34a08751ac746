"""What a worker says as it starts: a one-line banner, and a warning for each lane whose queue nothing
names (a typo in --queues would otherwise serve nothing, silently)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, connections

from ..conf import jobq_settings
from ..models import Job
from ..registry import registered_tasks
from ..status import JobStatus
from .lanes import ALL_QUEUES

if TYPE_CHECKING:
    from .core import Worker

logger = logging.getLogger("django_jobq")
BACKEND = "django_jobq.backend.JobqBackend"


def banner(worker: Worker) -> str:
    """``worker ID started: lanes default:4,*:2; postgresql database 'default' (jobq@host:5432);
    LISTEN/NOTIFY wake-ups, 1s poll``."""
    conf = jobq_settings()
    lanes = ",".join(f"{name}:{lane.slots}" for name, lane in worker.lanes.items())
    connection = connections[conf.database]
    db: dict[str, Any] = connection.settings_dict
    where = str(db.get("NAME") or "?")
    if db.get("HOST") or db.get("PORT"):
        where += f"@{db.get('HOST') or 'localhost'}:{db.get('PORT') or 'default port'}"
    wake = "LISTEN/NOTIFY wake-ups" if worker.listen else (
        "in-process wake-ups" if worker.wake_in_process else "no wake-ups"
    )  # fmt: skip
    extras = "".join(
        f", {name}" for name, on in (("reaper", worker.reaper), ("scheduler", worker.scheduler)) if on
    )
    return (
        f"worker {worker.worker_id} started: lanes {lanes}; {connection.vendor} database "
        f"{conf.database!r} ({where}); {wake}, {worker.poll_interval:g}s poll{extras}"
    )


def named_queues() -> set[str]:
    """The queues something names: a registered task, JOBQ["QUEUES"], a schedule, the Django Tasks
    backends' QUEUES (their "default" when they list none)."""
    conf = jobq_settings()
    names = {task.queue for task in registered_tasks().values()} | set(conf.queues)
    names |= {schedule.queue for schedule in conf.schedules.values() if schedule.queue}
    for options in (getattr(settings, "TASKS", None) or {}).values():
        if isinstance(options, dict) and options.get("BACKEND") == BACKEND:
            names |= set(options.get("QUEUES") or ["default"])
    return names


def unnamed_lanes(worker: Worker) -> list[str]:
    """The worker's lanes (but "*") whose queue nothing names and no PENDING job is in."""
    names = named_queues()
    candidates = [name for name in worker.lanes if name != ALL_QUEUES and name not in names]
    jobs = Job.objects.using(jobq_settings().database)
    return [name for name in candidates if not jobs.filter(status=JobStatus.PENDING, queue=name).exists()]


def warn_unnamed_lanes(worker: Worker) -> None:
    """Log a warning for each of unnamed_lanes() (none when the database does not answer)."""
    try:
        unnamed = unnamed_lanes(worker)
    except DatabaseError:
        return
    for name in unnamed:
        logger.warning(
            "worker %s: no task, setting or pending job names the queue %r of its lane %r; a typo in "
            "--queues? (queues named: %s)",
            worker.worker_id, name, name, ", ".join(sorted(named_queues())) or "none",
        )  # fmt: skip
