"""Metrics against a real PostgreSQL: a real worker's runs counted, the database's figures agreeing with
the table at a bounded cost, and the Django view's access rules."""

import datetime as dt
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_jobq import metrics
from django_jobq.metrics import worker as worker_metrics
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.worker import Worker
from tests.conftest import ROOT, child_env, start_worker, wait_until
from tests.integration.conftest import dead_job, make_job, running_job
from tests.servers.proxy import PausableProxy

pytestmark = [pytest.mark.integration, pytest.mark.django_facing]

URL = "/jobq/metrics/"


def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.REGISTRY).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def fresh_figures(settings):
    """The database collector registered, its cache emptied (it lives as long as the process)."""
    metrics.enable_database_metrics()
    collector = metrics.database_collector()
    collector.forget()
    yield collector
    collector.forget()


@pytest.fixture
def read_statements():
    """The statements the figures' reads ran, each read on a connection of its own: the query log of
    every connection opened meanwhile."""
    opened = []

    def created(sender, connection, **kwargs):
        if connection is not connections[connection.alias]:  # not a thread's own (this test's)
            connection.force_debug_cursor = True
            opened.append(connection)

    connection_created.connect(created)
    yield lambda: [query["sql"] for each in opened for query in each.queries_log]
    connection_created.disconnect(created)


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_draining_three_tasks_is_counted_as_the_table_says(fresh_figures):
    worker_metrics.connect()
    before = samples()
    for i in range(10):
        Job.objects.enqueue("test.echo", {"n": i}, queue="mq")
    for _ in range(4):
        Job.objects.enqueue("test.flaky", {"failures": 1}, queue="mq")
    for _ in range(3):
        Job.objects.enqueue("test.always_fails", queue="mq", max_attempts=1)
    for _ in range(50):  # a burst ends when nothing is due: again until the retries (0.05-0.1 s) ran
        Worker({"mq": 3}, burst=True).run()
        if not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
            break
        time.sleep(0.05)
    fresh_figures.forget()  # the database's figures as they are now, not as the first scrape cached them
    after = samples()

    def delta(name: str, task: str) -> float:
        return of(after, name, queue="mq", task=task) - of(before, name, queue="mq", task=task)

    done = {t: Job.objects.filter(status=JobStatus.DONE, task=t).count() for t in ("test.echo", "test.flaky")}
    assert delta("jobq_jobs_succeeded_total", "test.echo") == done["test.echo"] == 10
    assert delta("jobq_jobs_succeeded_total", "test.flaky") == done["test.flaky"] == 4
    assert delta("jobq_jobs_retried_total", "test.flaky") == 4  # each failed its first attempt once
    assert (
        delta("jobq_jobs_dead_total", "test.always_fails")
        == Job.objects.filter(status=JobStatus.DEAD).count()
    )
    for task in ("test.echo", "test.flaky", "test.always_fails"):
        ended = sum(delta(f"jobq_jobs_{n}_total", task) for n in ("succeeded", "retried", "dead"))
        assert delta("jobq_jobs_started_total", task) == ended, task
    assert delta("jobq_job_run_seconds_count", "test.echo") == 10
    claimed = of(after, "jobq_claimed_jobs_total", lane="mq") - of(
        before, "jobq_claimed_jobs_total", lane="mq"
    )
    assert claimed >= 17  # each of the 17 jobs claimed at least once (an in-slot retry is no new claim)
    assert of(after, "jobq_claims_total", lane="mq") > of(before, "jobq_claims_total", lane="mq")
    assert delta("jobq_job_wait_seconds_count", "test.echo") == 10
    # the database's figures, read after the drain
    assert of(after, "jobq_queue_jobs", queue="mq", state="dead") == 3
    assert of(after, "jobq_queue_jobs", queue="mq", state="pending") == 0
    assert of(after, "jobq_database_up") == 1


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_the_database_figures_agree_with_the_table_and_cost_six_statements(
    fresh_figures, settings, read_statements
):
    settings.JOBQ = {**settings.JOBQ, "METRICS_CACHE_SECONDS": 60}
    now = timezone.now()
    make_job(queue="emails", run_at=now - dt.timedelta(seconds=120))
    make_job(queue="emails", run_at=now + dt.timedelta(hours=1))  # not due
    running_job(queue="emails")
    running_job(queue="reports", lease_until=now - dt.timedelta(seconds=5))  # expired
    dead_job(queue="reports")
    Job.objects.pause_queue("reports")
    WorkerRecord.objects.create(worker_id="h:1", hostname="h", pid=1, lanes={"emails": 2})
    WorkerRecord.objects.create(worker_id="h:2", hostname="h", pid=2, lanes={}, stopped_at=now)
    Job.objects.acquire_lease("reaper", "me", 30)
    found = samples()
    # the clock, ACTIVE, QUEUE_ROWS, the live workers' lanes, HEALTH, and the seats held (the test
    # app registers tasks with a max_running): whatever the table holds
    assert len(read_statements()) == 6
    samples()
    assert len(read_statements()) == 6  # inside METRICS_CACHE_SECONDS: read once
    for queue in ("emails", "reports"):
        counts = Job.objects.counts(queue)
        for state in ("pending", "running", "dead"):
            assert of(found, "jobq_queue_jobs", queue=queue, state=state) == counts[state.upper()], (
                queue,
                state,
            )
    assert of(found, "jobq_queue_due_jobs", queue="emails") == 1
    assert 110 <= of(found, "jobq_queue_lag_seconds", queue="emails") < 300
    assert of(found, "jobq_queue_expired_leases", queue="reports") == 1
    assert (
        of(found, "jobq_queue_paused", queue="reports") == 1
        and of(found, "jobq_queue_paused", queue="emails") == 0
    )
    assert of(found, "jobq_workers_alive") == 1
    assert of(found, "jobq_queue_unserved", queue="emails") == 0  # h:1's lane names it
    assert 0 < of(found, "jobq_reaper_lease_seconds_left") <= 30
    assert (
        of(found, "jobq_table_bytes", part="table") > 0 and of(found, "jobq_table_bytes", part="indexes") > 0
    )


PER_QUEUE = ("jobq_queue_due_jobs", "jobq_queue_lag_seconds", "jobq_queue_expired_leases",
             "jobq_queue_paused", "jobq_queue_unserved")  # fmt: skip
STATES = ("pending", "running", "dead", "waiting")


@pytest.mark.django_db(transaction=True)
def test_a_capped_queues_seats_held_are_a_gauge(fresh_figures, settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 5}, "idle": {"MAX_RUNNING": 2}}}
    Job.objects.take_seats("w1", "capped", cap=5, want=2)
    Job.objects.take_seats("w2", "capped", cap=5, want=1)
    found = samples()
    assert found["jobq_queue_seats_held", (("queue", "capped"),)] == 3
    assert found["jobq_queue_seats_held", (("queue", "idle"),)] == 0
    assert not [
        key for key in found if key[0] == "jobq_queue_seats_held" and dict(key[1])["queue"] == "other"
    ]


@pytest.mark.django_db(transaction=True)
def test_a_capped_tasks_seats_held_are_a_gauge(fresh_figures):
    Job.objects.take_seats("w1", "task:test.capped", cap=2, want=2)
    found = samples()
    assert found["jobq_task_seats_held", (("task", "test.capped"),)] == 2
    assert found["jobq_task_seats_held", (("task", "test.capped_occupy"),)] == 0
    assert not [
        key for key in found if key[0] == "jobq_queue_seats_held" and "task:" in dict(key[1])["queue"]
    ]
    assert not [
        key
        for key in found
        if key[0] == "jobq_task_seats_held" and dict(key[1])["task"] == "test.capped_per_key"
    ]


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_every_known_queue_has_every_series_zeros_included(fresh_figures, settings):
    """A queue is known from JOBQ["QUEUES"], jobq_queue's rows, a live worker's lanes, its active jobs
    or the planner's statistics; each has jobq_queue_jobs for every state and every per-queue family,
    0 where nothing is there (a rule comparing with an hour ago, a stat panel, need the zero)."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"configured": {"MAX_RUNNING": 2}}}
    now = timezone.now()
    Job.objects.pause_queue("resumed")
    Job.objects.resume_queue("resumed")  # a row in jobq_queue, not paused
    WorkerRecord.objects.create(worker_id="h:1", hostname="h", pid=1, lanes={"laned": 1, "*": 1})
    make_job(queue="future", run_at=now + dt.timedelta(hours=1))  # pending, nothing due
    dead_job(queue="deadonly")
    for _ in range(3):  # only in the finished history (a value ANALYZE saw more than once)
        make_job(queue="history", status=JobStatus.DONE, finished_at=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobq_job")  # the planner's statistics name it
    found = samples()
    known = {"configured", "resumed", "laned", "future", "deadonly", "history"}
    for queue in known:
        for state in STATES:
            assert ("jobq_queue_jobs", (("queue", queue), ("state", state))) in found, (queue, state)
        for name in PER_QUEUE:
            assert (name, (("queue", queue),)) in found, (name, queue)
    assert not [key for key in found if dict(key[1]).get("queue") == "*"]  # a lane, not a queue
    nonzero = {
        key: value for key, value in found.items() if key[0] in (*PER_QUEUE, "jobq_queue_jobs") and value
    }
    assert nonzero == {
        ("jobq_queue_jobs", (("queue", "future"), ("state", "pending"))): 1,
        ("jobq_queue_jobs", (("queue", "deadonly"), ("state", "dead"))): 1,
    }


@pytest.mark.django_db(transaction=True)
def test_a_queue_with_due_jobs_and_no_live_worker_serving_it_is_unserved(fresh_figures):
    now = timezone.now()
    for queue in ("emails", "reports", "paused", "later"):
        make_job(queue=queue, run_at=now - dt.timedelta(seconds=5))
    make_job(queue="future", run_at=now + dt.timedelta(hours=1))  # nothing due: nothing waits
    Job.objects.pause_queue("paused")
    WorkerRecord.objects.create(worker_id="h:1", hostname="h", pid=1, lanes={"emails": 2})
    WorkerRecord.objects.create(worker_id="h:2", hostname="h", pid=2, lanes={"reports": 1}, stopped_at=now)
    WorkerRecord.objects.create(worker_id="h:3", hostname="h", pid=3, lanes={"later": 1},
                                last_seen_at=now - dt.timedelta(hours=1))  # fmt: skip
    found = samples()
    unserved = {queue: of(found, "jobq_queue_unserved", queue=queue) for queue in
                ("emails", "reports", "paused", "later", "future")}  # fmt: skip
    # reports: its only worker stopped; later: its worker's heartbeat is an hour old
    assert unserved == {"emails": 0, "reports": 1, "paused": 0, "later": 1, "future": 0}

    assert all(("jobq_queue_unserved", (("queue", q),)) in found for q in unserved)  # each one reported

    WorkerRecord.objects.create(worker_id="h:4", hostname="h", pid=4, lanes={"*": 4})  # serves all
    fresh_figures.forget()
    found = samples()
    assert {of(found, "jobq_queue_unserved", queue=q) for q in unserved} == {0}


@pytest.mark.django_db
def test_a_database_that_does_not_answer_is_a_figure_not_a_failed_scrape(fresh_figures, monkeypatch):
    from django_jobq.metrics import database

    def broken(connection):
        raise RuntimeError("connection refused")

    monkeypatch.setattr(database, "_figures", broken)
    found = samples()
    assert of(found, "jobq_database_up") == 0
    assert not [key for key in found if key[0] == "jobq_queue_jobs"]


# -- the Django view ---------------------------------------------------------------------------------------
@pytest.fixture
def metrics_urls(settings):
    settings.ROOT_URLCONF = "tests.testapp.metrics_urls"


@pytest.mark.p1
@pytest.mark.django_db
def test_the_view_is_off_by_default(client, admin_client, metrics_urls):
    assert client.get(URL).status_code == 404
    assert admin_client.get(URL).status_code == 404


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_the_view_for_staff(client, admin_client, staff, settings, metrics_urls, fresh_figures):
    settings.JOBQ = {**settings.JOBQ, "METRICS_VIEW": "staff"}
    Job.objects.enqueue("test.echo", queue="viewq")
    assert client.get(URL).status_code == 403
    response = admin_client.get(URL)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    assert 'jobq_queue_jobs{queue="viewq",state="pending"} 1.0' in response.content.decode()
    assert staff().get(URL).status_code == 200  # any staff user, no permission needed
    assert admin_client.post(URL).status_code == 405


@pytest.mark.p1
@pytest.mark.django_db
def test_the_view_with_a_bearer_token(client, admin_client, settings, metrics_urls, fresh_figures):
    token = "s3cret-s3cret-s3cret"
    settings.JOBQ = {**settings.JOBQ, "METRICS_VIEW": "token", "METRICS_TOKEN": token}
    assert client.get(URL).status_code == 401
    assert client.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(URL, headers={"Authorization": f"Basic {token}"}).status_code == 401
    assert admin_client.get(URL).status_code == 401  # staff without the token: no
    response = client.get(URL, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200 and b"jobq_database_up 1.0" in response.content


# -- the commands' endpoint --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, timeout: float = 5) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_jobq_worker_serves_its_runs_and_the_database_figures():
    for i in range(5):
        Job.objects.enqueue("test.echo", {"n": i}, queue="served")
    port = free_port()
    worker = start_worker("--queues", "served", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1",
                          "--metrics-db", stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 5, message="5 jobs done")

        def counted():
            try:
                found = scrape(port)
            except OSError:
                return None
            return (
                found
                if of(found, "jobq_jobs_succeeded_total", queue="served", task="test.echo") == 5
                else None
            )

        found = wait_until(counted, message="the endpoint to count 5 runs")
        assert of(found, "jobq_database_up") == 1 and of(found, "jobq_workers_alive") >= 1
        assert of(found, "jobq_queue_jobs", queue="served", state="pending") == 0
        assert of(found, "jobq_lane_slots", lane="served") == 4  # --concurrency's default
        assert (
            of(found, "jobq_lane_busy_slots", lane="served") == 0
            and of(found, "jobq_lane_stuck_slots", lane="served") == 0
        )
    finally:
        worker.terminate()
        assert worker.wait(timeout=30) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--metrics-db",), "--metrics-db needs --metrics-port"),
        (("--metrics-port", "70000"), "must be in"),
        (("--metrics-port", "{taken}", "--metrics-addr", "127.0.0.1"), "cannot serve metrics"),
        (("--metrics-port", "9", "--metrics-addr", "not an address"), "cannot serve metrics"),
    ],
)
@pytest.mark.django_db
def test_bad_metrics_options_are_refused_before_anything_runs(args, message):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args = tuple(a.format(taken=taken.getsockname()[1]) for a in args)
        with pytest.raises(CommandError, match=message):
            call_command("jobq_reap", "--once", *args)


@pytest.mark.django_db(transaction=True)
def test_a_transaction_left_open_is_the_oldest_transactions_age(fresh_figures):
    """jobq_oldest_transaction_seconds: 0 with no other transaction open; an open one's age while it
    stays open (it holds back vacuum)."""
    import psycopg

    from django_jobq.notify.listener import connection_params

    assert of(samples(), "jobq_oldest_transaction_seconds") < 5  # none, or a moment's
    with psycopg.connect(**connection_params("default")) as holder:
        holder.execute("SELECT txid_current()")
        time.sleep(0.3)
        fresh_figures.forget()
        assert of(samples(), "jobq_oldest_transaction_seconds") >= 0.3
        holder.rollback()


@pytest.mark.slow
@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_a_scrape_through_a_link_that_stops_forwarding_answers_database_down_then_up_again(tmp_path):
    """jobq_reap --metrics-db reaches PostgreSQL through a proxy that stops forwarding (no reset, no
    close), JOBQ["METRICS_TIMEOUT_SECONDS"] 1, no cache. Every scrape during the cut, four at once
    among them, is answered (within the generous wait given here, 20 times the timeout) with
    jobq_database_up 0 and no other figure; once the link forwards again, up is 1."""
    Job.objects.enqueue("test.echo", queue="linked")
    db = connection.settings_dict
    target = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    port, log = free_port(), tmp_path / "reap.log"
    with PausableProxy(target) as proxy, log.open("w") as stderr:
        url = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
        env = child_env(DATABASE_URL=url, JOBQ_METRICS_TIMEOUT_SECONDS="1", JOBQ_METRICS_CACHE_SECONDS="0")
        reaper = subprocess.Popen(
            [sys.executable, "-m", "django", "jobq_reap", "--interval", "0.5", "--metrics-port", str(port),
             "--metrics-addr", "127.0.0.1", "--metrics-db"],
            env=env, cwd=ROOT, stderr=stderr, text=True,
        )  # fmt: skip

        def figures() -> dict | None:
            try:
                return scrape(port, timeout=20)
            except OSError:  # not listening yet
                return None

        try:
            found = wait_until(lambda: (f := figures()) and of(f, "jobq_database_up") == 1 and f,
                               message="the figures through the proxy")  # fmt: skip
            assert of(found, "jobq_queue_jobs", queue="linked", state="pending") == 1
            proxy.pause()
            answers: list[dict] = []
            scrapes = [
                threading.Thread(target=lambda: answers.append(scrape(port, timeout=20))) for _ in range(4)
            ]
            for each in scrapes:
                each.start()
            answers.append(scrape(port, timeout=20))
            for each in scrapes:
                each.join()
            answers.append(scrape(port, timeout=20))  # a read still hangs on the link: answered all the same
            assert len(answers) == 6
            for found in answers:
                assert of(found, "jobq_database_up") == 0
                assert not [key for key in found if key[0] == "jobq_queue_jobs"]
            proxy.resume()
            found = wait_until(lambda: (f := scrape(port, timeout=20)) and of(f, "jobq_database_up") == 1 and f,
                               message="the figures again once the link forwards")  # fmt: skip
            assert of(found, "jobq_queue_jobs", queue="linked", state="pending") == 1
        finally:
            proxy.resume()
            reaper.terminate()
            assert reaper.wait(timeout=30) == 0
    assert "the database did not answer within 1.0 s" in log.read_text()
