"""Settings for the test suite: a real PostgreSQL from DATABASE_URL."""

import django
import environ

env = environ.Env()
SECRET_KEY = "tests"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {"default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/jobq")}
# A streaming standby of the test database's server, started by tests/servers/standby.py on a free port
# (JOBQ_TEST_REPLICA_PORT to fix it) for the read-replica tests only: its test database is the
# primary's, streamed (TEST MIRROR), never created on it.
DATABASES["replica"] = {
    **DATABASES["default"],
    "PORT": env("JOBQ_TEST_REPLICA_PORT", default=""),
    "TEST": {"MIRROR": "default"},
}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobq",
    "example_project.shop",
    "tests.testapp",
]
if django.VERSION < (6, 0):  # Django's Tasks API from the django-tasks backport
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "django_jobq.backend.JobqBackend",
        "QUEUES": ["default", "emails", "slow", "other"],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    }
}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Worker subprocesses of the tests take shorter leases from the environment.
JOBQ = {
    "LEASE_SECONDS": env.float("JOBQ_LEASE_SECONDS", default=30),
    "HEARTBEAT_SECONDS": env.float("JOBQ_HEARTBEAT_SECONDS", default=2),
    "POLL_INTERVAL": env.float("JOBQ_POLL_INTERVAL", default=0.5),
    "BACKOFF_BASE": env.float("JOBQ_BACKOFF_BASE", default=5),
    "QUEUES": env.json("JOBQ_QUEUES", default={}),
}
if "JOBQ_CLAIM_AHEAD" in env:  # otherwise the default, as shipped
    JOBQ["CLAIM_AHEAD"] = env.int("JOBQ_CLAIM_AHEAD")
for _key in (
    "DONE_RETENTION_SECONDS", "DEAD_RETENTION_SECONDS", "REAP_INTERVAL", "SCHEDULE_GRACE_SECONDS",
    "METRICS_CACHE_SECONDS", "METRICS_TIMEOUT_SECONDS", "UNKNOWN_TASK_GRACE",
):  # fmt: skip
    if f"JOBQ_{_key}" in env:  # the reliability tests prune within seconds, widen a grace; metrics bounds
        JOBQ[_key] = env.float(f"JOBQ_{_key}")
# Shard servers a test started (tests/servers/shards.py), for its worker subprocesses:
# JOBQ_TEST_SHARDS = '{"jobs2": [1, PORT], ...}' (alias: [shard number, port]).
if "JOBQ_TEST_SHARDS" in env:
    JOBQ["SHARDS"] = {}
    for _alias, (_number, _port) in env.json("JOBQ_TEST_SHARDS").items():
        DATABASES[_alias] = {
            **DATABASES["default"],
            "NAME": "jobq_shard",
            "HOST": "127.0.0.1",
            "PORT": str(_port),
        }
        JOBQ["SHARDS"][_alias] = _number
    DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]
# Shards behind transaction-mode poolers (tests/integration/test_shards_pooled.py): JOBQ_TEST_SHARDS's
# ports are the poolers', JOBQ_TEST_LISTEN maps each database to its direct DSN.
if "JOBQ_TEST_LISTEN" in env:
    JOBQ["POOL_MODE"] = "transaction"
    JOBQ["LISTEN_DATABASE"] = env.json("JOBQ_TEST_LISTEN")
    for _alias in JOBQ.get("SHARDS", {}):
        DATABASES[_alias]["DISABLE_SERVER_SIDE_CURSORS"] = True
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_jobq": {"handlers": ["stderr"], "level": env("JOBQ_LOG_LEVEL", default="WARNING")}},
}
