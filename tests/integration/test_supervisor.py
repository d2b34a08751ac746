"""``jobq_worker --processes N``: a real supervisor and its worker processes on the test database, killed,
recycled, reloaded and stopped. These tests kill processes; they never run alongside other database
tests."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.supervisor import EXIT_RESTART_LIMIT
from tests.conftest import start_worker, wait_until
from tests.testapp.models import Ledger

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]

FAST = {
    "JOBQ_LEASE_SECONDS": "2",
    "JOBQ_HEARTBEAT_SECONDS": "0.5",
    "JOBQ_POLL_INTERVAL": "0.2",
    "JOBQ_REAP_INTERVAL": "0.5",
    "JOBQ_LOG_LEVEL": "INFO",
}
STARTED = re.compile(r"supervisor \S+: started worker (\S+) \(pid (\d+)\)")


class Supervised:
    """A ``jobq_worker --processes`` process; it and its workers write to one log file."""

    def __init__(self, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.path = log
        with open(log, "w") as out:
            self.proc = start_worker(*args, env={**FAST, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.path.read_text()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60) -> list[re.Match[str]]:
        """The log's first ``count`` matches of ``pattern``, once there are that many."""
        return wait_until(
            lambda: (found := list(re.finditer(pattern, self.log()))) and len(found) >= count and found,
            timeout=timeout, message=f"{count} x {pattern!r} in the log:\n{self.log()[-3000:]}",
        )  # fmt: skip

    def pids(self) -> dict[str, int]:
        """Every worker process started so far, by worker id."""
        return {m[1]: int(m[2]) for m in STARTED.finditer(self.log())}

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the supervisor did not exit:\n{self.log()[-3000:]}") from None

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in self.pids().values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def supervise(tmp_path):
    """Start a supervisor (``jobq_worker ARGS``); everything it started is killed at teardown."""
    started: list[Supervised] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Supervised:
        supervised = Supervised(tmp_path / f"supervisor-{len(started)}.log", *args, env=env)
        started.append(supervised)
        return supervised

    yield start
    for supervised in started:
        supervised.cleanup()


def alive(pid: int) -> bool:
    """The process runs (neither gone nor a zombie awaiting its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def database_connections(pid: int) -> int:
    """TCP connections process ``pid`` holds to the test database's port."""
    port = int(connection.settings_dict["PORT"] or 5432)
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = 0
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                found += 1
    return found


def ledger_runs(ids: list[int]) -> dict[int, int]:
    """Runs recorded per job."""
    rows = Ledger.objects.filter(job_id__in=ids).values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}


def all_done(ids: list[int]) -> bool:
    return Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == len(ids)


@pytest.mark.p0
def test_a_worker_killed_mid_job_is_replaced_and_its_job_finishes_once(supervise):
    jid = Job.objects.enqueue("test.ledger", {"first_run_seconds": 60})
    sup = supervise("--processes", "2", "--concurrency", "2", "--reap", "--worker-id", "sup")
    first = wait_until(lambda: Ledger.objects.filter(job_id=jid).first(), message="the job running")
    victim = first.worker_id
    os.kill(sup.pids()[victim], signal.SIGKILL)
    sup.wait_for(rf"worker {victim} \(pid \d+\) killed by SIGKILL after [\d.]+s \(crash\); 1 unplanned exit")
    sup.wait_for(r"supervisor sup: worker sup/3 \(pid \d+\) ready after")  # its replacement runs
    wait_until(lambda: all_done([jid]), message="the job recovered by its lease and done")
    runs = list(Ledger.objects.filter(job_id=jid).order_by("fence").values_list("fence", "worker_id"))
    assert runs[0] == (1, victim) and len(runs) == 2 and runs[1][0] == 2 and runs[1][1] != victim
    job = Job.objects.get(id=jid)
    assert (job.attempts, job.result) == (2, {"fence": 2})
    # every process records what its supervisor told it: the restart and what ended
    survivor = next(w for w in ("sup/1", "sup/2") if w != victim)

    def told(worker_id: str) -> dict | None:
        record = WorkerRecord.objects.filter(worker_id=worker_id).first()
        state = record.supervisor if record else None
        return state if state and state["restarts"] == 1 else None

    for worker_id in (survivor, "sup/3"):
        state = wait_until(lambda w=worker_id: told(w), message=f"{worker_id}'s record of its supervisor")
        assert (state["id"], state["processes"], state["started"], state["pid"]) == (
            "sup",
            2,
            3,
            sup.proc.pid,
        )
        assert re.fullmatch(rf"{victim} killed by SIGKILL after [\d.]+s \(crash\)", state["last_exit"])
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0
    assert "3 worker process(es) started, 1 unplanned exit(s); exit status 0" in sup.log()


@pytest.mark.p1
def test_the_supervisors_endpoint_gives_each_process_figures_labelled_by_worker(supervise):
    """Each process's counters stay its own series (a sum would fall when one ends): their sum is the
    jobs run; a process that ends leaves, its replacement joins, and the supervisor counts the exit."""
    from tests.integration.test_metrics import free_port, scrape

    ids = [Job.objects.enqueue("test.noop") for _ in range(20)]
    port = free_port()
    sup = supervise(
        "--processes", "2", "--concurrency", "2", "--worker-id", "fed", "--metrics-port", str(port)
    )
    sup.wait_for(r"supervisor fed: worker fed/2 \(pid \d+\) ready after", count=1)
    wait_until(lambda: all_done(ids), message="the jobs done")

    def succeeded(figures: dict) -> dict[str, float]:
        return {
            dict(labels)["worker"]: value
            for (name, labels), value in figures.items()
            if name == "jobq_jobs_succeeded_total"
        }

    def up(figures: dict) -> dict[str, float]:
        return {
            dict(labels)["worker"]: value
            for (name, labels), value in figures.items()
            if name == "jobq_supervisor_worker_up"
        }

    # a process counts as up once it has told the supervisor its port: until then it is reported 0
    figures = wait_until(
        lambda: (f := scrape(port)) and sum(succeeded(f).values()) == 20 and set(up(f).values()) == {1} and f,
        message="20 runs counted, both processes read",
    )
    assert set(succeeded(figures)) <= {"fed/1", "fed/2"}
    assert figures[("jobq_supervisor_processes", ())] == 2
    assert up(figures) == {"fed/1": 1, "fed/2": 1}
    assert ("jobq_lane_slots", (("lane", "*"), ("worker", "fed/1"))) in figures  # each process's own gauges
    os.kill(sup.pids()["fed/1"], signal.SIGKILL)
    sup.wait_for(r"supervisor fed: worker fed/3 \(pid \d+\) ready after")
    figures = wait_until(
        lambda: (f := scrape(port)) and ("jobq_supervisor_worker_up", (("worker", "fed/3"),)) in f and f,
        message="the replacement's figures",
    )
    assert ("jobq_supervisor_worker_up", (("worker", "fed/1"),)) not in figures
    assert figures[("jobq_supervisor_unplanned_exits_total", ())] == 1
    assert figures[("jobq_supervisor_started_total", ())] == 3
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0


@pytest.mark.p1
def test_a_leaking_worker_is_replaced_above_max_memory_and_no_job_is_lost_or_run_twice(supervise):
    ids = Job.objects.enqueue_many(NewJob("test.leak", {"pause": 0.2}) for _ in range(50))
    sup = supervise("--max-memory", "100", "--concurrency", "1", "--worker-id", "sup")  # ~60 MiB at start
    sup.wait_for(
        r"worker sup/1 \(pid \d+\) uses \d+ MiB, above --max-memory 100 MiB; starting its replacement"
    )
    sup.wait_for(r"started worker sup/2 \(pid \d+\) to replace sup/1 \(memory\)")
    sup.wait_for(r"worker sup/1 \(pid \d+\) exited 0 after [\d.]+s \(recycled for memory\)")
    wait_until(lambda: all_done(ids), timeout=120, message="every job done")
    assert ledger_runs(ids) == dict.fromkeys(ids, 1)
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0
    assert "0 unplanned exit(s)" in sup.log()


@pytest.mark.p1
def test_max_jobs_starts_the_replacement_before_the_old_worker_stops(supervise):
    ids = Job.objects.enqueue_many(NewJob("test.ledger", {"ms": 30}) for _ in range(150))
    sup = supervise("--processes", "2", "--concurrency", "2", "--max-jobs", "20", "--worker-id", "sup")
    wait_until(lambda: all_done(ids), timeout=120, message="every job done")
    recycling = r"stopping worker (\S+) \(pid \d+\) \(recycled after --max-jobs\): (\S+) runs in its place"
    sup.wait_for(recycling)
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0
    log = sup.log()
    for match in re.finditer(recycling, log):
        old, new = match[1], match[2]
        asked = re.search(
            rf"worker {old}: \d+ job\(s\) done, asking the supervisor to replace it", log
        ).start()
        replacement = log.index(f"started worker {new} ")
        runs = log.index(f"worker {new} started: lanes")  # the new worker's own banner
        stopped = log.index(f"worker {old} stopped after")
        assert asked < replacement < runs < match.start() < stopped, (old, new)
    assert ledger_runs(ids) == dict.fromkeys(ids, 1)
    assert "0 unplanned exit(s)" in log and "recycled after --max-jobs" in log.splitlines()[-1]


@pytest.mark.p0
def test_sighup_replaces_every_worker_one_at_a_time_while_jobs_drain(supervise):
    ids = Job.objects.enqueue_many(NewJob("test.ledger", {"ms": 150}) for _ in range(300))
    sup = supervise("--processes", "2", "--concurrency", "4", "--worker-id", "sup")
    wait_until(lambda: Ledger.objects.count() >= 40, message="the drain under way")
    sup.signal(signal.SIGHUP)
    sup.wait_for(r"worker (sup/1|sup/2) \(pid \d+\) exited 0 after [\d.]+s \(reloaded\)", count=2)
    log = sup.log()
    # One at a time: the second old worker is picked only once the first one's replacement runs.
    picked = [m.start() for m in re.finditer(r"supervisor sup: reloading worker", log)]
    stops = [
        m.start() for m in re.finditer(r"stopping worker \S+ \(pid \d+\) \(reloaded\): \S+ runs in", log)
    ]
    assert len(picked) == len(stops) == 2 and picked[0] < stops[0] < picked[1] < stops[1], log
    wait_until(lambda: all_done(ids), timeout=120, message="every job done")
    assert ledger_runs(ids) == dict.fromkeys(ids, 1)
    more = Job.objects.enqueue_many(NewJob("test.ledger") for _ in range(20))  # only the new ones serve
    wait_until(lambda: all_done(more), message="jobs after the reload")
    served = set(Ledger.objects.filter(job_id__in=more).values_list("worker_id", flat=True))
    assert served <= {"sup/3", "sup/4"}
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0
    assert "2 reloaded; exit status 0" in sup.log()


@pytest.mark.p0
def test_workers_that_fail_as_they_start_back_off_then_the_supervisor_gives_up(supervise):
    sup = supervise(
        "--processes", "2", "--max-restarts", "5", "--restart-window", "300", "--worker-id", "sup",
        env={"JOBQ_TEST_SUPERVISED_FAILS": "1"},
    )  # fmt: skip
    assert sup.wait(120) == EXIT_RESTART_LIMIT
    log = sup.log()
    assert "this worker process refuses to start" in log
    steps = re.findall(
        r"crash loop: (\d) unplanned exits within 300s, worker processes ending within 10s of starting; "
        r"next start in ([\d.]+)s",
        log,
    )
    # the first two exits are started again at once; the crash loop begins at the third, and moves
    # once per step: the 4th and 6th exits are siblings of the one before
    assert [(int(n), float(s)) for n, s in steps] == [(3, 1), (5, 2)]
    assert "more than --max-restarts 5 unplanned exits within 300s; giving up" in log
    assert log.count("unplanned exit(s) within 300s (--max-restarts 5)") == 6
    assert log.splitlines()[-1] == (
        "supervisor sup stopped (too many restarts): 6 worker process(es) started, 6 unplanned exit(s); "
        f"exit status {EXIT_RESTART_LIMIT}"
    )
    assert not any(alive(pid) for pid in sup.pids().values())


@pytest.mark.p0
def test_sigterm_drains_every_worker_and_exits_0_and_the_supervisor_holds_no_connection(supervise):
    ids = Job.objects.enqueue_many(NewJob("test.ledger", {"ms": 2000}) for _ in range(2))
    sup = supervise("--processes", "2", "--concurrency", "1", "--grace", "30", "--worker-id", "sup")
    sup.wait_for(r"worker sup/[12] \(pid \d+\) ready after", count=2)
    wait_until(lambda: Ledger.objects.count() == 2, message="both jobs running")
    children = sup.pids()
    assert all(database_connections(pid) > 0 for pid in children.values())  # the probe sees them
    assert database_connections(sup.proc.pid) == 0
    sup.signal(signal.SIGTERM)
    assert sup.wait() == 0
    assert all_done(ids)  # finished within the grace period, not released
    assert Job.objects.filter(id__in=ids, attempts=1).count() == 2
    log = sup.log()
    assert len(re.findall(r"worker sup/[12] \(pid \d+\) exited 0 after [\d.]+s \(stopped\)", log)) == 2
    assert log.splitlines()[-1] == (
        "supervisor sup stopped (SIGTERM): 2 worker process(es) started, 0 unplanned exit(s); exit status 0"
    )
    assert not any(alive(pid) for pid in children.values())


@pytest.mark.p0
def test_workers_drain_and_exit_when_their_supervisor_is_killed(supervise):
    jid = Job.objects.enqueue("test.ledger", {"ms": 1500})
    sup = supervise("--processes", "2", "--worker-id", "sup")
    sup.wait_for(r"worker sup/[12] \(pid \d+\) ready after", count=2)
    wait_until(lambda: Ledger.objects.filter(job_id=jid).exists(), message="the job running")
    children = sup.pids()
    sup.signal(signal.SIGKILL)
    sup.wait()
    wait_until(lambda: not any(alive(pid) for pid in children.values()), message="the orphans gone")
    job = Job.objects.get(id=jid)
    assert (job.status, job.attempts) == (JobStatus.DONE, 1)  # drained, not released nor reaped
    assert sup.log().count("its supervisor is gone; draining and exiting") == 2


@pytest.mark.p1
def test_a_second_signal_stops_the_workers_at_once_and_their_running_jobs_go_back(supervise):
    jid = Job.objects.enqueue("test.ledger", {"first_run_seconds": 60})
    sup = supervise("--processes", "2", "--grace", "60", "--worker-id", "sup")
    wait_until(lambda: Ledger.objects.filter(job_id=jid).exists(), message="the job running")
    sup.signal(signal.SIGTERM)
    sup.wait_for(r"supervisor sup: SIGTERM: stopping 2 worker process\(es\)")
    sup.signal(signal.SIGINT)  # as a second SIGTERM: no waiting out the 60 s grace
    assert sup.wait(30) == 0
    assert "second SIGINT: its worker processes stop at once" in sup.log()
    job = Job.objects.get(id=jid)
    assert (job.status, job.worker_id) == (JobStatus.PENDING, None)  # released at once, not left to a lease
    assert "released" in job.errors[-1]["error"]


@pytest.mark.p1
def test_burst_workers_finish_the_backlog_and_the_supervisor_exits_0(supervise):
    ids = Job.objects.enqueue_many(NewJob("test.ledger", {"ms": 20}) for _ in range(60))
    sup = supervise("--processes", "2", "--burst", "--worker-id", "sup")
    assert sup.wait(120) == 0
    assert all_done(ids) and ledger_runs(ids) == dict.fromkeys(ids, 1)
    log = sup.log()
    assert len(re.findall(r"exited 0 after [\d.]+s: nothing left to do \(--burst\)", log)) == 2
    assert log.splitlines()[-1] == (
        "supervisor sup stopped (every worker finished): 2 worker process(es) started, 0 unplanned exit(s); "
        "exit status 0"
    )
