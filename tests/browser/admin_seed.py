"""What the browser tests of the admin see: a small, lively queue (seed) and an order's workflow
(seed_workflow), with long names where the pages must wrap or clip them."""

import datetime as dt

from django.db import connection
from django.utils import timezone

from django_jobq.models import Job, JobStatus, Schedule, ScheduleSource, ScheduleTick, WorkerRecord

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/tasks.py", line 41, in send_receipt\n'
    "    smtp.send_message(message)\n"
    "smtplib.SMTPServerDisconnected: Connection unexpectedly closed\n"
)


# The hard case of each page, on purpose: a worker id and host as long as a cluster's pod names make
# them, a worker serving many lanes, and long queue names (one with no place to break a line).
LONG_HOST = "jobq-worker-reports-and-exports-7d9f8c6b5-x2k9p.jobq-workers.production.svc.cluster.local"
LONG_WORKER = f"{LONG_HOST}:48213:a3f9c1"
LONG_QUEUE = "tenant-reports-export-eu-west-1-high-priority"
UNBROKEN_QUEUE = "billing_invoices_monthly_close_and_reconciliation_eu"
MANY_LANES = {
    LONG_QUEUE: 8, UNBROKEN_QUEUE: 2, "emails": 4, "interactive": 8, "default": 2, "search-reindex": 1,
    "thumbnails": 6, "webhooks-outbound-retry": 3, "notifications-push": 4, "imports-csv-large": 1,
    "audit-log-archive": 1, "reports": 2,
}  # fmt: skip


def empty_queue_tables() -> None:
    """Nothing but what seed() writes: rows another test left (a worker's last heartbeat, written after
    its test's flush) would change what the pages hold from run to run."""
    from django.apps import apps

    tables = [m._meta.db_table for m in apps.get_app_config("django_jobq").get_models() if not m._meta.proxy]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


CANCELLED_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/tasks.py", line 58, in send_receipt\n'
    "    context.check_cancelled()\n"
    "django_jobq.outcomes.Cancelled: job 77 was cancelled\n"
)


def seed() -> Job:
    """A small, lively queue: backlog, running jobs with progress, an hour of history, workers, dead letters;
    in a queue table holding nothing else, with long names where the pages must wrap or clip them."""
    empty_queue_tables()
    now = timezone.now()
    with connection.cursor() as cursor:
        # An hour of finished jobs: a steady trickle with a burst, and a few failures.
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, started_at, finished_at)
               SELECT (ARRAY['shop.send_receipt', 'shop.search', 'shop.resize_image'])[1 + i % 3],
                      (ARRAY['emails', 'interactive', 'default'])[1 + i % 3], '{}',
                      CASE WHEN i % 97 = 0 THEN 3 ELSE 2 END, 100, now(), 1, 5, '[]', now(), now(),
                      now() - make_interval(secs => (i * 7919) % 3600 / (1 + (i % 4 = 0)::int))
               FROM generate_series(1, 2400) AS i"""
        )
    for i in range(14):
        Job.objects.create(
            task="shop.send_receipt",
            queue="emails",
            payload={"order": 100 + i},
            run_at=now - dt.timedelta(seconds=20 * i),
        )
    for i, done in enumerate((12, 55, 88)):
        Job.objects.create(
            task="shop.resize_image",
            queue="default",
            status=JobStatus.RUNNING,
            attempts=1,
            payload={"album": i},
            progress={"done": done, "total": 100},
            worker_id="web-2:311",
            started_at=now - dt.timedelta(seconds=40),
            lease_until=now + dt.timedelta(seconds=20),
        )
    errors = [
        {
            "attempt": n,
            "at": (now - dt.timedelta(minutes=9 - n)).isoformat(),
            "worker": "web-1:207",
            "error": TRACEBACK,
        }
        for n in (1, 2, 3)
    ]
    dead = [
        Job.objects.create(
            task="shop.send_receipt",
            queue="emails",
            status=JobStatus.DEAD,
            attempts=3,
            max_attempts=3,
            payload={"order": 90 + i},
            worker_id="web-1:207",
            last_error=TRACEBACK,
            exception="smtplib.SMTPServerDisconnected",  # written by the statement that made it DEAD
            errors=errors,
            started_at=now - dt.timedelta(minutes=2),
            finished_at=now - dt.timedelta(minutes=i + 1),
        )
        for i in range(3)
    ]
    Job.objects.create(
        task="shop.search",
        queue="interactive",
        status=JobStatus.DEAD,
        attempts=1,
        max_attempts=1,
        payload={"q": "lamp"},
        last_error="KeyError: 'lamp'",
        exception="KeyError",
        finished_at=now,
    )
    for i in range(3):  # one tenant's report exports: two waiting, one running
        Job.objects.create(
            task="shop.export_report",
            queue="reports",
            payload={"tenant": 42, "report": i},
            tags=["tenant:42", "export"],
            **(
                {"status": JobStatus.RUNNING, "attempts": 1, "worker_id": "web-2:311", "started_at": now,
                 "lease_until": now + dt.timedelta(seconds=20)}
                if i == 0 else {}
            ),
        )  # fmt: skip
    Job.objects.create(
        task="shop.export_report", queue="reports", payload={"tenant": 7}, tags=["tenant:7", "export"]
    )
    Job.objects.create(  # cancelled while it ran: its run ended on the task's check_cancelled()
        task="shop.send_receipt",
        queue="emails",
        status=JobStatus.CANCELLED,
        attempts=1,
        payload={"order": 77},
        tags=["tenant:42"],
        last_error=CANCELLED_TRACEBACK,
        cancelled_by="admin oncall",
        cancel_requested_at=now - dt.timedelta(minutes=4),
        started_at=now - dt.timedelta(minutes=4),
        finished_at=now - dt.timedelta(minutes=4) + dt.timedelta(milliseconds=380),
    )
    Job.objects.create(  # asked to stop, still running
        task="shop.resize_image",
        queue="default",
        status=JobStatus.RUNNING,
        attempts=1,
        payload={"album": 9},
        worker_id="web-2:311",
        started_at=now - dt.timedelta(seconds=50),
        lease_until=now + dt.timedelta(seconds=20),
        cancel_requested_at=now - dt.timedelta(seconds=5),
        cancelled_by="admin oncall",
    )
    WorkerRecord.objects.create(
        worker_id="web-1:207", hostname="web-1", pid=207, lanes={"emails": 4, "interactive": 8}, running=0
    )
    WorkerRecord.objects.create(
        worker_id=LONG_WORKER, hostname=LONG_HOST, pid=48213, lanes=MANY_LANES, running=2,
        stuck={UNBROKEN_QUEUE: 2},
    )  # fmt: skip
    for queue in (LONG_QUEUE, UNBROKEN_QUEUE):  # one running on the long worker, one waiting, per queue
        Job.objects.create(
            task="shop.export_report", queue=queue, status=JobStatus.RUNNING, attempts=1,
            payload={"tenant": 9}, worker_id=LONG_WORKER, started_at=now,
            lease_until=now + dt.timedelta(seconds=20),
        )  # fmt: skip
        Job.objects.create(task="shop.export_report", queue=queue, payload={"tenant": 9})
    WorkerRecord.objects.create(
        worker_id="web-2:311", hostname="web-2", pid=311, lanes={"default": 3}, running=3,
        supervisor={
            "id": "web-2", "host": "web-2", "pid": 300, "started_at": "2026-12-03T09:00:00+00:00",
            "processes": 2, "started": 4, "restarts": 2, "recycled": 0,
            "last_exit": "web-2/3 killed by SIGKILL after 40.2s (crash)",
        },
    )  # fmt: skip
    # schedules of both sources, one with a long name, a time zone and a published tick
    Schedule.objects.create(
        name="nightly-inventory-reconciliation-for-every-warehouse", task="shop.reconcile_inventory",
        cron="30 2 * * 1-5", timezone="America/Argentina/Buenos_Aires", next_run_at=now + dt.timedelta(hours=7),
        last_tick_at=now - dt.timedelta(hours=17), source=ScheduleSource.SETTINGS,
    )  # fmt: skip
    Schedule.objects.create(
        name="morning-digest", task="shop.send_digest", at="07:15", next_run_at=now + dt.timedelta(minutes=12)
    )
    ScheduleTick.objects.create(
        schedule="morning-digest", tick=now - dt.timedelta(hours=1), job_id=dead[0].pk, published_at=now
    )
    return dead[0]


def seed_workflow():
    """An order's workflow: a chain into a group of six with a callback, the first two jobs done."""
    from django_jobq.workflows import Signature, chain, group

    members = [Signature("test.echo", {"order": 42, "part": n}, queue="emails") for n in range(6)]
    workflow = chain(
        Signature("test.echo", {"order": 42, "step": "reserve"}, queue="emails"),
        Signature("test.echo", {"order": 42, "step": "charge"}, queue="emails"),
        group(*members, then=Signature("test.noop", {"order": 42}, queue="emails")),
    ).enqueue(name="order 42: reserve, charge, ship six parcels, then notify")
    now = timezone.now()
    for job_id in workflow.job_ids[:2]:  # finished as a worker would: the trigger settles the next one
        Job.objects.filter(pk=job_id).update(
            status=JobStatus.DONE, attempts=1, started_at=now, finished_at=now, result={"ok": True}
        )
    return workflow
