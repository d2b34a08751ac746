"""Test settings with the queue on its own database alias, "queue", routed there by
django_jobq.routers.JobqRouter: the app's tables on DATABASE_URL, jobq's on JOBQ_QUEUE_URL (the
subprocesses of tests/integration/test_queue_alias.py)."""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, JOBQ, env

DATABASES = {"default": DATABASES["default"], "queue": env.db("JOBQ_QUEUE_URL")}
DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]
JOBQ = {**JOBQ, "DATABASE": "queue"}
