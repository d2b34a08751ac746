"""A small Wagtail site (tests.wagtailsite) on django-jobq's Django Tasks backend: Wagtail's background
tasks (reference index, search index) become jobq jobs that jobq_worker runs. Used by the
subprocesses of tests/integration/test_wagtail.py on a database of their own."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, JOBQ

INSTALLED_APPS = [
    *(app for app in INSTALLED_APPS if app not in {"example_project.shop", "tests.testapp"}),
    "django.contrib.postgres",  # wagtailsearch.IndexEntry's SearchVectorField on PostgreSQL (postgres.E005)
    "tests.wagtailsite",
    "wagtail.search",
    "wagtail",
    "modelcluster",
    "taggit",
]
TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend"}}  # Wagtail's tasks: queue "default"
ROOT_URLCONF = "tests.wagtailsite.urls"
WAGTAIL_SITE_NAME = "jobq on Wagtail"
WAGTAILADMIN_BASE_URL = "http://testserver"
WAGTAILSEARCH_BACKENDS = {"default": {"BACKEND": "wagtail.search.backends.database"}}
# A page deleted before its background task ran: the job ends CANCELLED, not DEAD after its retries.
JOBQ = {**JOBQ, "DISCARD_ON": ["django.core.exceptions.ObjectDoesNotExist"]}
