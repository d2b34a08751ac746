"""A worker process with metrics and tracing off: prints, as its last line, the modules of WATCHED it
imported. On ``sqlite DATABASE_FILE`` it migrates the file, enqueues two jobs and runs
``jobq_worker --burst`` (every import a run makes, with no database server); on ``postgresql`` it
imports the command and builds the worker ``jobq_worker`` would run, without connecting.

Usage: python -m tests.procs.worker_imports sqlite PATH | postgresql
"""

import json
import sys

import django
from django.conf import settings

WATCHED = (
    "prometheus_client",  # metrics: only with --metrics-port
    "opentelemetry",  # tracing: only with django_jobq.tracing.middleware or a project's own spans
    "django_jobq.admin",  # the admin's pages: Django's admin app imports them, never the worker
    "django_jobq.backend",  # the Django Tasks layer: only with TASKS naming it
    "django_jobq.metrics",
    "django_jobq.supervisor.core",  # only with --processes N or --max-memory
    "cronsim",  # only with a schedule
    "sqlite3",  # only on SQLite
)


def probe_task() -> None:
    return None


def main(engine: str, path: str = "") -> None:
    databases = {
        "sqlite": {"ENGINE": "django.db.backends.sqlite3", "NAME": path},
        "postgresql": {"ENGINE": "django.db.backends.postgresql", "NAME": "never_connected"},
    }
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django_jobq"],
        DATABASES={"default": databases[engine]},
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    from django.core.management import call_command

    from django_jobq import task

    probe = task(name="probe.noop")(probe_task)
    if engine == "sqlite":
        from django_jobq.models import Job, JobStatus

        call_command("migrate", verbosity=0)
        probe.enqueue()
        probe.enqueue()
        call_command("jobq_worker", "--burst", "--concurrency", "2")
        done = Job.objects.filter(status=JobStatus.DONE).count()
        assert done == 2, f"{done} of 2 jobs DONE"
    else:
        from django_jobq.management.commands.jobq_worker import Command
        from django_jobq.worker import Worker, parse_lanes

        Command().create_parser("manage.py", "jobq_worker").parse_args(["--concurrency", "4"])
        Worker(parse_lanes("*", 4))
    print(json.dumps(sorted(m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in WATCHED))))


if __name__ == "__main__":
    main(*sys.argv[1:])
