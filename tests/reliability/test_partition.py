"""Partition: a worker in its own network namespace reaches PostgreSQL only through a veth pair; the
link is cut for longer than the lease while the worker holds jobs. The reaper returns them, another
worker finishes them; when the link comes back, every late write of the cut-off worker is refused,
nothing is DONE twice, and the cut-off worker serves again."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.servers import pgcluster
from tests.testapp.models import Ledger

from .support import Processes, report

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

LEASE, HEARTBEAT = 2.0, 0.5
ENV = {
    "JOBQ_LEASE_SECONDS": str(LEASE),
    "JOBQ_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "JOBQ_POLL_INTERVAL": "0.2",
}
NETWORK, HOST_IP, NS_IP = "10.77.0.0/24", "10.77.0.1", "10.77.0.2"
SLOTS = 4
FIRST_RUN_SECONDS = 14.0  # the cut-off worker's runs outlast the partition, then try to write


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Link:
    """A network namespace joined to this host by a veth pair (HOST_IP here, NS_IP inside)."""

    def __init__(self) -> None:
        tag = os.getpid() % 100_000
        self.ns, self.host, self.peer = f"jobq{tag}", f"jqh{tag}", f"jqn{tag}"

    def create(self) -> None:
        ip("netns", "add", self.ns)
        ip("link", "add", self.host, "type", "veth", "peer", "name", self.peer)
        ip("link", "set", self.peer, "netns", self.ns)
        ip("addr", "add", f"{HOST_IP}/24", "dev", self.host)
        ip("link", "set", self.host, "up")
        ip("-n", self.ns, "addr", "add", f"{NS_IP}/24", "dev", self.peer)
        ip("-n", self.ns, "link", "set", self.peer, "up")
        ip("-n", self.ns, "link", "set", "lo", "up")

    def cut(self) -> None:
        ip("link", "set", self.host, "down")

    def restore(self) -> None:
        ip("link", "set", self.host, "up")

    def remove(self) -> None:
        for args in (("link", "del", self.host), ("netns", "del", self.ns)):
            subprocess.run(["ip", *args], capture_output=True, timeout=30)

    def exists(self) -> bool:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
        return self.ns in listed.split() or f" {self.host}@" in links or f" {self.host}:" in links

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]


def netns_problem() -> str | None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "network namespaces need root and iproute2's ip"
    probe = f"jobqprobe{os.getpid() % 100_000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def link(restartable):
    problem = netns_problem()
    if problem:
        pytest.skip(problem)
    reachable = pgcluster.Reachable(NETWORK)
    made = Link()
    try:
        made.create()
        reachable.apply()
        yield made
    finally:
        made.remove()
        reachable.undo()
    assert not made.exists(), "the namespace or the veth pair outlived the test"


def _late_refusals(log: str) -> set[int]:
    return {int(m) for m in re.findall(r"job (\d+): result not recorded, the job is no longer ours", log)}


@pytest.mark.p0
@pytest.mark.parametrize(
    ("task", "count", "slots"),
    [
        ("test.ledger", SLOTS, SLOTS),  # a job per slot
        ("test.ledger_batch", 5 * SLOTS, 1),  # one slot's batch holds them all (django_jobq.batches)
    ],
)
def test_a_cut_off_worker_loses_its_jobs_its_late_writes_are_refused_and_it_serves_again(
    link, processes: Processes, task: str, count: int, slots: int
):
    processes.env = ENV
    db = connection.settings_dict
    url = f"postgres://{db['USER'] or 'postgres'}@{HOST_IP}:{pgcluster.test_port()}/{db['NAME']}"
    isready = ["pg_isready", "-q", "-h", HOST_IP, "-p", str(pgcluster.test_port())]
    assert subprocess.run([*link.prefix, *isready], timeout=30).returncode == 0, "no route from the namespace"
    ids = Job.objects.enqueue_many(
        NewJob(task, {"ms": 0, "first_run_seconds": FIRST_RUN_SECONDS}) for _ in range(count)
    )
    try:
        processes.worker("cutoff", "--concurrency", str(slots), prefix=link.prefix, env={"DATABASE_URL": url})
        wait_until(lambda: Ledger.objects.filter(worker_id="cutoff").count() == count, timeout=60,
                   message="the namespaced worker running every job")  # fmt: skip
        link.cut()
        cut = time.monotonic()
        processes.start("reaper", "jobq_reap", "--interval", "0.5")
        processes.worker("rescuer", "--concurrency", str(SLOTS))
        wait_until(lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == count,
                   timeout=60, message="the other worker finishing the returned jobs")  # fmt: skip
        rescued = time.monotonic() - cut
        processes.stop("rescuer")
        time.sleep(max(0.0, 3 * LEASE - (time.monotonic() - cut)))  # the cut outlasts the lease 3 times
        link.restore()
        partition = time.monotonic() - cut
        refused = wait_until(lambda: _late_refusals(processes.log("cutoff")) >= set(ids) and
                             _late_refusals(processes.log("cutoff")), timeout=60,
                             message="the cut-off worker's late writes")  # fmt: skip
        after = time.monotonic()
        more = Job.objects.enqueue_many(NewJob("test.ledger", {"ms": 10}) for _ in range(2 * SLOTS))
        wait_until(lambda: Job.objects.filter(id__in=more, status=JobStatus.DONE).count() == 2 * SLOTS,
                   timeout=60, message="the cut-off worker serving again")  # fmt: skip
        served_again = time.monotonic() - after
        assert processes.running["cutoff"].poll() is None, "the cut-off worker died"
    finally:
        processes.stop_all()  # before the namespace goes
    jobs = {j.id: j for j in Job.objects.filter(id__in=ids)}
    runs = {(r.job_id, r.fence, r.worker_id) for r in Ledger.objects.filter(job_id__in=ids)}
    report(
        "partition",
        lease_s=LEASE,
        task=task,
        jobs_held=count,
        partition_s=round(partition, 2),
        rescued_after_cut_s=round(rescued, 2),
        late_writes_refused=len(refused & set(ids)),
        done_twice=sum(1 for j in jobs.values() if (j.worker_id, j.fence) != ("rescuer", 2)),
        served_again_after_s=round(served_again, 2),
        served_again_jobs=Job.objects.filter(id__in=more, worker_id="cutoff").count(),
    )  # fmt: skip
    assert refused >= set(ids)  # each late DONE of the cut-off worker refused
    for job in jobs.values():  # finished once, by the run that took over, and left as it finished it
        assert (job.status, job.worker_id, job.fence, job.result) == (
            JobStatus.DONE,
            "rescuer",
            2,
            {"fence": 2},
        )
    assert runs == {(i, 1, "cutoff") for i in ids} | {(i, 2, "rescuer") for i in ids}
    assert set(Job.objects.filter(id__in=more).values_list("worker_id", flat=True)) == {"cutoff"}
    for job in jobs.values():  # returned by the reaper, from the cut-off worker
        assert any(e["worker"] == "cutoff" and e["error"].startswith("lease expired") for e in job.errors)
