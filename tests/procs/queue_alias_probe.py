"""Steps of tests/integration/test_queue_alias.py, run with tests.settings.queue_alias (jobq on the
"queue" alias, the app on "default"); each prints its findings as JSON.

Usage: python -m tests.procs.queue_alias_probe enqueue|admin
"""

import json
import sys

import django

django.setup()

from django.db import transaction  # noqa: E402

from django_jobq.managers import NewJob  # noqa: E402
from django_jobq.models import Job  # noqa: E402


class Rollback(Exception):
    pass


def enqueue() -> dict:
    with transaction.atomic(using="queue"):  # the queue's transaction: the jobs commit with it
        kept = Job.objects.enqueue_many(NewJob("test.noop", {"n": n}) for n in range(20))
    try:
        with transaction.atomic(using="queue"):
            gone = Job.objects.enqueue("test.noop", {"rolled": "back"})
            raise Rollback
    except Rollback:
        pass
    try:
        with transaction.atomic():  # the default database's: the queue's write does not join it
            stays = Job.objects.enqueue("test.noop", {"default": "rolled back"})
            raise Rollback
    except Rollback:
        pass
    return {"kept": kept, "gone": gone, "stays": stays}


def admin() -> dict:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user = User.objects.create_superuser("alias-admin", "a@example.com", "x")
    client = Client()
    client.force_login(user)
    pages = {}
    for name, url in {
        "jobs": "/admin/django_jobq/job/",
        "job": f"/admin/django_jobq/job/{Job.objects.order_by('id').values_list('id', flat=True)[0]}/change/",
        "dashboard": "/admin/django_jobq/job/dashboard/",
        "workers": "/admin/django_jobq/workerrecord/",
        "schedules": "/admin/django_jobq/schedule/",
    }.items():
        response = client.get(url)
        pages[name] = {"status": response.status_code, "body": response.content.decode()}
    return {"pages": pages, "done": Job.objects.filter(status=2).count()}


if __name__ == "__main__":
    print(json.dumps({"enqueue": enqueue, "admin": admin}[sys.argv[1]]()))
