"""metrics.worker and the exposition: the worker's signals counted per queue and task, hostile names
that cannot break the text format, the settings of the metrics view (no database)."""

import datetime as dt
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_jobq import signals
from django_jobq.conf import JobqSettings
from django_jobq.exceptions import ConfigurationError
from django_jobq.metrics import REGISTRY, serve
from django_jobq.metrics import worker as metrics
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


def job(task="shop.send_receipt", queue="emails", **fields):
    values = {"id": 1, "created_at": T0, "run_at": T0, "started_at": T0 + dt.timedelta(seconds=2)}
    return SimpleNamespace(task=task, queue=queue, **{**values, **fields})


def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of REGISTRY, parsed back from the text format: (name, labels) -> value."""
    text = generate_latest(REGISTRY).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(name: str, **labels: str) -> float:
    return scraped().get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(autouse=True)
def connected():
    metrics.connect()


def test_each_signal_counts_its_outcome_per_queue_and_task():
    labels = {"queue": "emails", "task": "shop.send_receipt"}
    before = {name: value(name, **labels) for name in (
        "jobq_jobs_started_total", "jobq_jobs_succeeded_total", "jobq_jobs_retried_total",
        "jobq_jobs_dead_total", "jobq_jobs_cancelled_total", "jobq_jobs_snoozed_total",
        "jobq_leases_lost_total", "jobq_job_run_seconds_count", "jobq_job_wait_seconds_count",
        "jobq_rate_limit_refusals_total",
    )}  # fmt: skip
    j = job()
    signals.send(signals.job_started, job=j, worker_id="w")
    signals.send(signals.job_succeeded, job=j, worker_id="w", result=None, duration=0.3)
    signals.send(signals.job_retried, job=j, worker_id="w", error="x", delay=1)
    signals.send(signals.job_retried, job=j, worker_id="w", error="x", delay=1)
    signals.send(signals.job_dead, job=j, worker_id="w", error="x")
    signals.send(signals.job_cancelled, job=j, worker_id="w", reason="cancelled")
    signals.send(signals.job_snoozed, job=j, worker_id="w", delay=5)
    signals.send(signals.job_lease_lost, job=j, worker_id="w")
    signals.send(signals.job_rate_limited, job=j, worker_id="w", delay=0.2)
    after = {name: value(name, **labels) - before[name] for name in before}
    assert after == {
        "jobq_jobs_started_total": 1, "jobq_jobs_succeeded_total": 1, "jobq_jobs_retried_total": 2,
        "jobq_jobs_dead_total": 1, "jobq_jobs_cancelled_total": 1, "jobq_jobs_snoozed_total": 1,
        "jobq_leases_lost_total": 1, "jobq_job_run_seconds_count": 1, "jobq_job_wait_seconds_count": 1,
        "jobq_rate_limit_refusals_total": 1,
    }  # fmt: skip
    assert value("jobq_job_wait_seconds_bucket", **labels, le="2.5") >= 1
    assert value("jobq_job_run_seconds_bucket", **labels, le="0.25") == before["jobq_job_run_seconds_count"]


def test_the_wait_is_counted_from_when_the_job_was_due():
    labels = {"queue": "later", "task": "t.wait"}
    scheduled = job(task="t.wait", queue="later", run_at=T0 + dt.timedelta(hours=1),
                    started_at=T0 + dt.timedelta(hours=1, seconds=0.004))  # fmt: skip
    signals.send(signals.job_started, job=scheduled, worker_id="w")
    assert (
        value("jobq_job_wait_seconds_bucket", **labels, le="0.005") == 1
    )  # not the hour it was scheduled for
    assert value("jobq_job_wait_seconds_sum", **labels) == pytest.approx(0.004)


def test_the_workers_own_problems_are_counted_by_module_and_level_not_a_jobs_failure():
    import logging

    log = logging.getLogger("django_jobq")
    before = {
        lv: value("jobq_worker_problems_total", source="test_metrics", level=lv)
        for lv in ("warning", "error")
    }
    log.warning("heartbeat failed (connection reset)")
    log.error("could not give back claimed-ahead jobs")
    log.error("job 7 is DEAD after attempt 3", extra={"job_id": 7, "task": "t"})  # counted by jobq_jobs_dead
    log.info("started")
    after = {
        lv: value("jobq_worker_problems_total", source="test_metrics", level=lv)
        for lv in ("warning", "error")
    }
    assert (after["warning"] - before["warning"], after["error"] - before["error"]) == (1, 1)


def test_claims_count_the_statements_and_the_jobs_they_took_per_lane():
    before = (value("jobq_claims_total", lane="claimq"), value("jobq_claimed_jobs_total", lane="claimq"))
    signals.send(signals.jobs_claimed, worker_id="w", lane="claimq", asked=8, claimed=5)
    signals.send(signals.jobs_claimed, worker_id="w", lane="claimq", asked=8, claimed=0)
    after = (value("jobq_claims_total", lane="claimq"), value("jobq_claimed_jobs_total", lane="claimq"))
    assert (after[0] - before[0], after[1] - before[1]) == (2, 5)


def test_connecting_twice_counts_once():
    metrics.connect()
    labels = {"queue": "q", "task": "t.once"}
    signals.send(signals.job_dead, job=job(task="t.once", queue="q"), worker_id="w")
    assert value("jobq_jobs_dead_total", **labels) == 1


@pytest.mark.parametrize(
    "task",
    [
        'evil"} jobq_jobs_dead_total{queue="x"} 1e9\n# HELP',
        "back\\slash",
        "new\nline",
        "ünïcødé ✓",
        "x" * 10_000,
    ],
)
def test_hostile_names_cannot_break_the_exposition_format(task):
    signals.send(signals.job_dead, job=job(task=task, queue="hostile"), worker_id="w")
    samples = scraped()
    assert samples[("jobq_jobs_dead_total", (("queue", "hostile"), ("task", task)))] >= 1
    assert not [
        key for key in samples if key[0] == "jobq_jobs_dead_total" and dict(key[1]).get("queue") == "x"
    ]


def test_the_endpoint_serves_the_registry():
    server = serve(0, "127.0.0.1")  # port 0: a free one
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain")
    finally:
        server.shutdown()
        server.server_close()
    names = {family.name for family in text_string_to_metric_families(body)}
    assert {"jobq_jobs_started", "jobq_job_run_seconds", "process_cpu_seconds"} <= names


@pytest.mark.parametrize(
    "raw",
    [
        {"METRICS_VIEW": "public"},
        {"METRICS_VIEW": "token"},  # no token
        {"METRICS_VIEW": "token", "METRICS_TOKEN": "short"},
        {"METRICS_TOKEN": "x" * 20 + "\n"},
        {"METRICS_TOKEN": 12345678901234567890},
        {"METRICS_CACHE_SECONDS": -1},
        {"METRICS_CACHE_SECONDS": float("nan")},
        {"METRICS_CACHE_SECONDS": True},
        {"METRICS_TIMEOUT_SECONDS": 0},
        {"METRICS_TIMEOUT_SECONDS": 61},
        {"METRICS_TIMEOUT_SECONDS": "5"},
    ],
)
def test_bad_metrics_settings_are_refused(raw):
    with pytest.raises(ConfigurationError, match="METRICS_"):
        JobqSettings.from_dict(raw)


def test_good_metrics_settings():
    conf = JobqSettings.from_dict({"METRICS_VIEW": "token", "METRICS_TOKEN": "s3cret-s3cret-s3cret"})
    assert (conf.metrics_view, conf.metrics_cache_seconds, conf.metrics_timeout_seconds) == ("token", 5, 5)
    assert JobqSettings.from_dict({}).metrics_view == "off"


def test_a_tally_sums_every_threads_figures_into_prometheus_counters_and_histograms():
    import threading

    from prometheus_client import CollectorRegistry

    from django_jobq.metrics.tally import Tally

    tally = Tally({"t_runs": "Runs."}, {"t_seconds": "Seconds."}, buckets=(0.1, 1.0))
    registry = CollectorRegistry()
    registry.register(tally)

    def work(n: int) -> None:
        for i in range(n):
            tally.count("t_runs", "q", "a")
            tally.observe("t_seconds", "q", "a", (0.05, 0.1, 0.5, 7.0)[i % 4])

    threads = [threading.Thread(target=work, args=(1000,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tally.count("t_runs", "q", "b", 2)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    a = (("queue", "q"), ("task", "a"))
    assert samples[("t_runs_total", a)] == 4000  # no update lost across threads
    assert samples[("t_runs_total", (("queue", "q"), ("task", "b")))] == 2
    # le is inclusive: 0.05 and 0.1 fall in le="0.1"; 0.5 in le="1.0"; 7.0 only in +Inf
    assert samples[("t_seconds_bucket", (("le", "0.1"), *a))] == 2000
    assert samples[("t_seconds_bucket", (("le", "1.0"), *a))] == 3000
    assert samples[("t_seconds_bucket", (("le", "+Inf"), *a))] == 4000
    assert samples[("t_seconds_count", a)] == 4000
    assert samples[("t_seconds_sum", a)] == pytest.approx(1000 * (0.05 + 0.1 + 0.5 + 7.0))


def test_a_receiver_hooked_by_django_jobq_that_raises_is_logged_and_the_others_still_run(caplog):
    seen = []

    def broken(**kwargs):
        raise RuntimeError("hook broke")

    signals.hook(signals.job_snoozed, broken)
    signals.hook(signals.job_snoozed, broken)  # once, however often hooked
    try:
        signals.hook(signals.job_snoozed, lambda **kw: seen.append(kw["delay"]))
        signals.send(signals.job_snoozed, job=job(), worker_id="w", delay=3)
    finally:
        signals._hooks[signals.job_snoozed] = tuple(
            h for h in signals._hooks[signals.job_snoozed] if h is not broken and h.__name__ != "<lambda>"
        )
    assert seen == [3]
    assert [r.getMessage() for r in caplog.records].count(f"signal receiver {broken!r} raised") == 1


def test_scrapes_share_one_read_and_none_waits_past_its_deadline(settings):
    """A read that hangs (a link that stopped forwarding): the scrapes that came during it answer
    jobq_database_up 0 once its deadline passed, those after it at once, and none starts another read
    while it is out. Once it ends, its late figures are dropped and the next scrape reads again."""
    import threading

    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    from django_jobq.metrics.database import DatabaseCollector

    settings.JOBQ = {**settings.JOBQ, "METRICS_TIMEOUT_SECONDS": 0.2, "METRICS_CACHE_SECONDS": 0}
    link, reads = threading.Event(), []

    def read() -> list[GaugeMetricFamily]:
        reads.append(len(reads) + 1)
        link.wait(60)
        up = GaugeMetricFamily("jobq_database_up", "up")
        up.add_metric([], 1)
        depth = GaugeMetricFamily("jobq_queue_jobs", "jobs", labels=("queue", "state"))
        depth.add_metric(["q", "pending"], len(reads))
        return [up, depth]

    registry = CollectorRegistry()
    registry.register(DatabaseCollector(read))

    def scrape() -> dict:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples
        }

    answers: list[dict] = []
    scrapes = [threading.Thread(target=lambda: answers.append(scrape())) for _ in range(4)]
    for each in scrapes:
        each.start()
    for each in scrapes:
        each.join()
    answers.append(scrape())  # after the deadline, the read still out
    assert answers == [{("jobq_database_up", ()): 0}] * 5
    assert reads == [1]
    link.set()  # the link forwards again: the hung read ends, late (until then, up 0 at once)
    found = wait_until(lambda: (f := scrape())[("jobq_database_up", ())] == 1 and f, message="up again")
    assert reads == [1, 2]  # its figures dropped, read again
    assert (
        found[("jobq_database_up", ())] == 1
        and found[("jobq_queue_jobs", (("queue", "q"), ("state", "pending")))] == 2
    )


def test_the_figures_connection_is_bounded_on_the_client_side_and_the_alias_options_win(settings):
    """Each read opens a connection of its own (never pooled), with libpq's connect timeout, TCP
    keepalives and tcp_user_timeout from JOBQ["METRICS_TIMEOUT_SECONDS"], unless the alias sets them."""
    from django.db import connections

    from django_jobq.metrics.database import reading_connection

    options = connections["default"].settings_dict.setdefault("OPTIONS", {})
    params = reading_connection("default", 0.5).get_connection_params()
    assert {k: params[k] for k in ("connect_timeout", "keepalives", "keepalives_idle", "tcp_user_timeout")} == {
        "connect_timeout": 2, "keepalives": 1, "keepalives_idle": 2, "tcp_user_timeout": 500,
    }  # fmt: skip
    saved = dict(options)
    options.update(connect_timeout=9, pool=True)
    try:
        wrapper = reading_connection("default", 7.5)
        assert wrapper is not connections["default"] and not wrapper.pool
        params = wrapper.get_connection_params()
        assert (params["connect_timeout"], params["keepalives_idle"], params["tcp_user_timeout"]) == (
            9,
            8,
            7500,
        )
    finally:
        options.clear()
        options.update(saved)


def test_a_pair_that_ran_has_every_counter_at_zero_until_it_counts():
    """jobq_leases_lost_total and the other counters of a (queue, task) that started a run are there at
    0, so the first lost lease (or dead run) is an increase, not a series that appears at 1."""
    signals.send(signals.job_started, job=job(task="t.zero", queue="zeroq"), worker_id="w")
    found = scraped()
    labels = (("queue", "zeroq"), ("task", "t.zero"))
    assert found[("jobq_jobs_started_total", labels)] == 1
    for name in ("succeeded", "retried", "dead", "cancelled", "snoozed"):
        assert found[(f"jobq_jobs_{name}_total", labels)] == 0, name
    assert found[("jobq_leases_lost_total", labels)] == 0
    assert found[("jobq_rate_limit_refusals_total", labels)] == 0


def test_a_read_that_raises_is_database_down_not_an_empty_scrape(settings):
    from prometheus_client import CollectorRegistry

    from django_jobq.metrics.database import DatabaseCollector

    settings.JOBQ = {**settings.JOBQ, "METRICS_CACHE_SECONDS": 0}

    def read():
        raise OSError("could not close the connection")

    registry = CollectorRegistry()
    registry.register(DatabaseCollector(read))
    assert registry.get_sample_value("jobq_database_up") == 0
