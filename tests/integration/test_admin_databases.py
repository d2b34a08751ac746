"""The console over several databases (django_jobq.admin.databases), against two real servers of
their own beside the test database (tests/servers/shards.py): each list shows the database it is
asked for, a job's pages follow the database its id names, actions change the jobs of the database
shown, the dashboard adds the databases up, and a database that is down is a page that says so,
never a server error."""

from __future__ import annotations

import datetime as dt
import re
import threading

import psycopg
import pytest
from django.contrib.admin.models import LogEntry
from django.db import ProgrammingError, transaction
from django.utils import timezone

from django_jobq.admin import database_reads
from django_jobq.conf import on_database
from django_jobq.managers.outbox import OutboxManager
from django_jobq.models import Job, JobStatus, OutboxEntry, QueueState
from django_jobq.notify.listener import connection_params
from tests.conftest import wait_until
from tests.integration.conftest import dead_job, make_job
from tests.servers.shards import SHARDS

pytestmark = [pytest.mark.integration, pytest.mark.django_facing]
ALIASES = ["default", *SHARDS]
JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"
DASHBOARD = "/admin/django_jobq/job/dashboard/"


def ids_listed(page: str) -> set[int]:
    """The job ids of a list page's rows (their checkboxes)."""
    return {int(i) for i in re.findall(r'name="_selected_action" value="(\d+)"', page)}


def on(alias: str, **fields) -> Job:
    with on_database(alias):
        return make_job(**fields)


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_job_list_shows_the_database_asked_for(placed, admin_client):
    home = [on("default").id for _ in range(2)]
    second = [on("jobs2", queue="reports").id for _ in range(3)]
    page = admin_client.get(JOBS).content.decode()
    assert ids_listed(page) == set(home)  # the home database, unless another is asked for
    assert "By database" in page and "jobs2 (shard 1)" in page and "jobs3 (shard 2)" in page
    response = admin_client.get(JOBS, {"database": "jobs2"})
    assert response.status_code == 200
    assert ids_listed(response.content.decode()) == set(second)
    filtered = admin_client.get(JOBS, {"database": "jobs2", "queue": "reports"}).content.decode()
    assert ids_listed(filtered) == set(second)  # the other filters apply on it
    sorting = re.findall(r'href="(\?[^"]*o=[^"]*)"', filtered)
    assert sorting and all("database=jobs2" in link for link in sorting)  # and its links keep it
    searched = admin_client.get(JOBS, {"q": str(second[0])}).content.decode()
    assert ids_listed(searched) == {second[0]}  # an id searched for names its database


@pytest.mark.parametrize("asked", ["nowhere", "x'; drop table jobq_job; --", "jobs2\x00", ""])
@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_database_that_is_not_jobqs_shows_the_home_one(placed, admin_client, asked):
    home = on("default").id
    on("jobs2", queue="reports")
    response = admin_client.get(JOBS, {"database": asked})
    assert response.status_code == 200
    assert ids_listed(response.content.decode()) == {home}


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_jobs_page_and_its_actions_follow_the_database_its_id_names(placed, admin_client):
    job = on("jobs3", queue="archive", payload={"order": 77})
    dead = None
    with on_database("jobs3"):
        dead = dead_job(queue="archive", task="test.flaky")
    page = admin_client.get(f"{JOBS}{job.id}/change/")
    assert page.status_code == 200 and "77" in page.content.decode()
    response = admin_client.post(f"{JOBS}{dead.id}/requeue/", {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert Job.objects.using("jobs3").get(id=dead.id).status == JobStatus.PENDING
    response = admin_client.post(f"{JOBS}{job.id}/cancel/", follow=True)
    assert response.status_code == 200
    assert Job.objects.using("jobs3").get(id=job.id).status == JobStatus.CANCELLED
    assert admin_client.get(f"{JOBS}{(5 << 48) + 1}/change/", follow=True).status_code == 200  # no shard 5


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_list_action_changes_the_jobs_of_the_database_shown(placed, admin_client):
    jobs = [on("jobs2", queue="reports") for _ in range(3)]
    left = on("jobs2", queue="reports")
    home = on("default")
    chosen = [str(j.id) for j in jobs] + [str(home.id)]  # the home job's id is not on jobs2's page
    data = {"action": "cancel_selected", "index": "0", "_selected_action": chosen, "post": "yes"}
    assert admin_client.post(f"{JOBS}?database=jobs2", data, follow=True).status_code == 200
    assert {j.id: j.status for j in Job.objects.using("jobs2").all()} == {
        **{j.id: JobStatus.CANCELLED for j in jobs}, left.id: JobStatus.PENDING,
    }  # fmt: skip
    assert Job.objects.using("default").get(id=home.id).status == JobStatus.PENDING
    everything = {
        "action": "cancel_selected",
        "index": "0",
        "select_across": "1",
        "_selected_action": [str(left.id)],
    }
    response = admin_client.post(f"{JOBS}?database=jobs2", everything, follow=True)
    assert "an action over every matching job runs on" in response.content.decode()
    assert Job.objects.using("jobs2").get(id=left.id).status == JobStatus.PENDING  # nothing done
    everything["_selected_action"] = [str(home.id)]
    response = admin_client.post(f"{JOBS}?database=default", everything)
    assert (
        response.status_code == 200 and 'name="jobq_selection"' in response.content.decode()
    )  # its confirmation


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_pausing_a_shards_queue_from_the_dashboard_stays_on_that_database(placed, admin_client):
    url = "/admin/django_jobq/job/dashboard/queue/"
    response = admin_client.post(url, {"queue": "reports", "action": "pause", "database": "jobs2"})
    assert response.status_code == 302 and response["Location"].endswith("?database=jobs2")
    assert QueueState.objects.using("jobs2").get(name="reports").paused
    assert not QueueState.objects.using("default").filter(name="reports").exists()
    assert LogEntry.objects.filter(change_message="Queue paused").count() == 1
    page = admin_client.get(response["Location"]).content.decode()
    assert "paused by" in page


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_shards_workflow_its_page_and_its_jobs(placed, admin_client):
    from django_jobq.workflows import Signature, chain

    handle = chain(Signature("test.noop", queue="reports"), Signature("test.noop", queue="reports")).enqueue(
        name="w"
    )
    assert admin_client.get(f"/admin/django_jobq/workflow/{handle.id}/change/").status_code == 200
    listed = admin_client.get(JOBS, {"q": f"workflow:{handle.id}"}).content.decode()
    assert ids_listed(listed) == set(handle.job_ids)


@pytest.mark.parametrize("bad", ["²", "١٢", "99999999999999999999999", "-1"])
@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_bad_id_is_no_server_error(placed, admin_client, client, bad):
    assert admin_client.get(f"{JOBS}{bad}/change/", follow=True).status_code == 200
    assert admin_client.get(JOBS, {"q": bad}).status_code == 200
    assert client.get(f"{JOBS}{bad}/change/").status_code == 302  # to the login page, as before


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_an_error_that_is_no_outage_is_not_hidden(placed, admin_client, monkeypatch):
    from django_jobq.admin.jobs import JobAdmin

    def broken(self, request):
        raise ProgrammingError("relation jobq_job does not exist")

    monkeypatch.setattr(JobAdmin, "get_queryset", broken)
    with pytest.raises(ProgrammingError):
        admin_client.get(JOBS, {"database": "jobs2"})


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_dead_letters_are_those_of_the_database_shown(placed, admin_client):
    with on_database("jobs3"):
        shard_dead = dead_job(queue="archive", task="test.shard_only", exc="KeyError")
    dead_job(task="test.home_only", exc="ValueError")
    page = admin_client.get(DEAD, {"database": "jobs3"}).content.decode()
    assert ids_listed(page) == {shard_dead.id}
    assert "test.shard_only" in page and "KeyError" in page and "test.home_only" not in page


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_dashboard_adds_the_databases_up_and_names_one_that_is_down(placed, admin_client):
    on("default")
    for _ in range(2):
        on("jobs2", queue="reports")
    for _ in range(4):
        on("jobs3", queue="archive")
    page = admin_client.get(DASHBOARD).content.decode()
    table = page[page.index('id="jobq-databases"') :]
    assert "all 3 of 3 databases" in table
    assert re.search(r"all 3 of 3 databases</th><td class=\"jobq-num\">7<", table), table[:2000]
    shown = admin_client.get(DASHBOARD, {"database": "jobs3"}).content.decode()
    assert "are those of jobs3 (shard 2)" in shown and "database=jobs3&amp;" in shown
    placed["jobs3"].stop("fast")
    try:
        page = admin_client.get(DASHBOARD)
        assert page.status_code == 200
        assert "cannot be read" in page.content.decode() and "all 2 of 3 databases" in page.content.decode()
        down = admin_client.get(JOBS, {"database": "jobs3"})
        assert down.status_code == 503
        assert "Database <strong>jobs3 (shard 2)</strong> cannot be read" in down.content.decode()
        assert ids_listed(admin_client.get(JOBS, {"database": "jobs2"}).content.decode())  # the others serve
    finally:
        placed["jobs3"].start()
    assert admin_client.get(JOBS, {"database": "jobs3"}).status_code == 200  # back, once it is


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_database_slow_to_answer_is_a_row_that_says_so_while_the_others_are_shown(
    placed, admin_client, monkeypatch, settings
):
    monkeypatch.setattr(database_reads, "READ_SECONDS", 1.0)
    # the read waits for the lock until the test lets go of it, however slow the machine
    settings.JOBQ = {**settings.JOBQ, "LOCK_TIMEOUT": 60, "STATEMENT_TIMEOUT": 60}
    on("jobs2", queue="reports")
    holder = psycopg.connect(**connection_params("jobs3"), autocommit=False)
    try:  # a lock every read of jobq_job on jobs3 waits for, until released
        holder.execute("LOCK TABLE jobq_job IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(60, holder.rollback)  # whatever happens, the lock goes
        release.start()
        page = admin_client.get(DASHBOARD).content.decode()
        table = page[page.index('id="jobq-databases"') :]
        assert "did not answer within 1 s" in table and "all 2 of 3 databases" in table
        assert re.search(r"all 2 of 3 databases</th><td class=\"jobq-num\">1<", table)  # jobs2's job, shown
        again = admin_client.get(DASHBOARD).content.decode()  # the read still waits: not read again
        assert "did not answer within 1 s" in again
        release.cancel()
        holder.rollback()
        wait_until(lambda: "all 3 of 3 databases" in admin_client.get(DASHBOARD).content.decode(),
                   message="the database answering again")  # fmt: skip
    finally:
        holder.close()


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_dashboard_shows_each_databases_outbox_and_marks_one_left_late(placed, admin_client, monkeypatch):
    monkeypatch.setattr(OutboxManager, "_relay_committed", lambda *args: None)  # the relay never came
    with transaction.atomic():  # on the home database, for queues of jobs2 and jobs3: its outbox
        Job.objects.enqueue("test.noop", queue="reports")
        Job.objects.enqueue("test.noop", queue="archive")
    table = admin_client.get(DASHBOARD).content.decode()
    table = table[
        table.index('id="jobq-databases"') : table.index("</table>", table.index('id="jobq-databases"'))
    ]
    rows = {
        re.sub(r"<[^>]*>", "", row.split(">", 1)[1].split("</th>")[0]).strip(): row
        for row in table.split("<tr")[2:]
    }
    assert re.search(r'<td class="jobq-num"[^>]*>2</td></tr>', rows["all 3 of 3 databases"])
    assert ">0</td>" in rows["jobs2 (shard 1)"].rsplit("<td", 1)[1]
    assert "jobq-alert" not in rows["default (shard 0)"].rsplit("<td", 1)[1]  # a second old: not late
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(minutes=5))
    page = admin_client.get(DASHBOARD).content.decode()
    assert re.search(r'jobq-alert"[^>]*>2 \(oldest 5m', page), "an entry 5 minutes old is late"


@pytest.mark.django_db(transaction=True)
def test_unsharded_the_console_has_no_database_filter(shard_servers, settings, admin_client):
    settings.JOBQ = {key: value for key, value in settings.JOBQ.items() if key != "SHARDS"}
    make_job()
    page = admin_client.get(JOBS).content.decode()
    assert "By database" not in page
    assert 'id="jobq-databases"' not in admin_client.get(DASHBOARD).content.decode()
