"""Settings of the example site; everything environment-specific comes from the environment."""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env(DEBUG=(bool, True))

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default="example-only-not-secret")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"])
# SQLite by default (a file next to this module, no server needed); DATABASE_URL switches to PostgreSQL,
# e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/jobq_demo.
DEMO_SQLITE = env.path("DEMO_SQLITE_PATH", default=BASE_DIR / "example_project" / "demo.sqlite3")
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DEMO_SQLITE}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE: a transaction takes SQLite's write lock when it begins (docs/reference/engines.md).
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
    SILENCED_SYSTEM_CHECKS = ["models.W040"]  # SQLite ignores one index's included column
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobq",
    "example_project.shop",
]
if django.VERSION < (6, 0):  # Django's Tasks API from the django-tasks backport
    INSTALLED_APPS.append("django_tasks")
# Django's Tasks API (@task from django.tasks) on the jobq table and worker.
TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend", "QUEUES": ["default", "emails"]}}
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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

JOBQ = {
    "LEASE_SECONDS": env.float("JOBQ_LEASE_SECONDS", default=60),
    "HEARTBEAT_SECONDS": env.float("JOBQ_HEARTBEAT_SECONDS", default=10),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_jobq": {"handlers": ["console"], "level": env("JOBQ_LOG_LEVEL", default="WARNING")}},
}
