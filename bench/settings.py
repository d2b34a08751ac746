"""Django settings for the benchmark's Django-based systems; BENCH_SYSTEM picks the apps.

The database is the throwaway one in BENCH_DATABASE_URL. Workers keep their connections
(CONN_MAX_AGE=None) for every system alike.
"""

import json
import os

from bench.common import parse_url

SYSTEM = os.environ.get("BENCH_SYSTEM", "jobq")
_db = parse_url(os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/jobq_bench_jobq"))

SECRET_KEY = "benchmark-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db["dbname"],
        "USER": _db["user"],
        "PASSWORD": _db["password"] or "",
        "HOST": _db["host"],
        "PORT": str(_db["port"]),
        "CONN_MAX_AGE": None,
    }
}

_APPS = {
    "jobq": ["django_jobq", "bench.jobqapp"],
    "jobq_pgbouncer": ["django_jobq", "bench.jobqapp"],
    "jobq_observed": ["django_jobq", "bench.jobqapp"],
    "jobq_tasks": ["django_jobq"],
    "tasks_db": ["django_tasks_db"],
    "ox": ["django_ox"],
    "q2": ["django_q"],
}
INSTALLED_APPS = ["django.contrib.contenttypes", *_APPS.get(SYSTEM, [])]

# django-jobq: its defaults (LISTEN/NOTIFY wake-ups, 1 s safety-net polling), plus what a workload
# sets in BENCH_JOBQ (JSON; e.g. the flow-control workloads' QUEUES).
JOBQ: dict[str, object] = json.loads(os.environ.get("BENCH_JOBQ", "{}"))
if SYSTEM == "jobq_observed":  # bench.systems.jobq_observed: the tracing middleware on every run
    JOBQ["MIDDLEWARE"] = ["django_jobq.tracing.middleware"]

# django-jobq through PgBouncer (bench.systems.jobq_pgbouncer): the queue's connections go through the
# pooler in BENCH_POOLER_URL, LISTEN straight to the server.
if os.environ.get("BENCH_POOLER_URL"):
    _pooled = parse_url(os.environ["BENCH_POOLER_URL"])
    DATABASES["direct"] = dict(DATABASES["default"])
    DATABASES["default"] = {
        **DATABASES["default"],
        "HOST": _pooled["host"],
        "PORT": str(_pooled["port"]),
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }
    JOBQ = {"POOL_MODE": "transaction", "LISTEN_DATABASE": "direct", **JOBQ}

if SYSTEM == "jobq_tasks":
    TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend"}}
elif SYSTEM == "tasks_db":
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
elif SYSTEM == "ox":
    TASKS = {"default": {"BACKEND": "django_ox.backend.OxBackend"}}

# django-q2 with its ORM broker: one cluster, BENCH_CONCURRENCY worker processes, 0.2 s polling.
Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": int(os.environ.get("BENCH_CONCURRENCY", "4")),
    "poll": 0.2,
    "timeout": 120,
    "retry": 240,
    "max_attempts": 1,
    "catch_up": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    # Django logs every task's start and finish at INFO (its "django" logger's level); off for every
    # system built on Django's tasks framework, as django-jobq's own per-job INFO lines are.
    "loggers": {"django.tasks": {"level": "WARNING"}},
}
