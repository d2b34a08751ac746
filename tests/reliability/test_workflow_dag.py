"""Workflows under worker kills: a seeded random DAG of 1,000 jobs (a fan-out of one job to 500, and
those 500 as a group whose callback fans them in), enqueued with one ``enqueue_graph`` call and
drained by two real worker processes while the test SIGKILLs one at random moments (restarting it
under a new id; a short lease lets the reaper return what the killed worker held). The group's
callback is also killed once, mid-run, on purpose.

Every run writes a ledger row (database clock) as it starts and as it ends. At the end: every job is
DONE and none is left WAITING; for every edge, every run of the dependent, its first included,
started after the dependency's DONE was committed (after its finished_at, and after the ledger end of
the run that wrote that DONE) and saw every dependency DONE; the callback's DONE came from exactly one
completed run, and each earlier run of any job was ended by a kill of its worker."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import time
from collections import defaultdict
from dataclasses import dataclass

import pytest

from django_jobq.managers.graphs import GraphNode
from django_jobq.models import Dependency, Job, JobStatus
from django_jobq.workflows import Signature, graph_nodes, group
from tests.testapp.models import Ledger
from tests.testapp.workflow_tasks import END, START

from .support import Processes, read, report, seeded, spread

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

TASK = "test.dag_node"
PREFIX, FAN, SUFFIX = 249, 500, 249  # + the hub and the callback: 1,000 jobs
WORKERS, SLOTS = 2, 4
LEASE, HEARTBEAT, POLL, REAP_INTERVAL = 3.0, 0.5, 0.5, 0.5
KILL_GAP = (1.0, 3.0)  # seconds between random kills
CALLBACK_FIRST_RUN = 2.0  # seconds the callback's first run lingers, so the test can kill it mid-run
DEADLINE, STALL = 120.0, 20.0  # seconds: the whole drain; no job finishing
ENV = {
    "JOBQ_LEASE_SECONDS": str(LEASE),
    "JOBQ_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "JOBQ_POLL_INTERVAL": str(POLL),
}


@dataclass(frozen=True, slots=True)
class Dag:
    nodes: list[GraphNode]
    hub: int  # index of the fan-out's source
    members: range  # indexes of the group's members (the hub's 500 dependents)
    callback: int  # index of the group's callback (the fan-in)


@dataclass(frozen=True, slots=True)
class Run:
    fence: int
    worker: str
    started: dt.datetime | None
    ended: dt.datetime | None


def _parents(rng: random.Random, index: int, most: int) -> tuple[int, ...]:
    """Up to ``most`` earlier nodes, mostly recent ones (long paths), some from anywhere (long edges)."""
    if index == 0:
        return ()
    chosen = set()
    for _ in range(rng.randint(0 if index < 5 else 1, most)):
        recent = rng.random() < 0.7
        chosen.add(rng.randrange(max(0, index - 20), index) if recent else rng.randrange(index))
    return tuple(sorted(chosen))


def build_dag(rng: random.Random) -> Dag:
    """PREFIX random nodes; the hub; FAN members each after the hub (a fifth also after a random prefix
    node) and their callback, built by ``group(..., then=...)``; SUFFIX random nodes after anything
    earlier, the callback included."""

    def payload(index: int, **extra: float) -> dict[str, float]:
        return {"node": index, "ms": rng.randint(5, 60), **extra}

    nodes = [GraphNode(TASK, payload(i), after=_parents(rng, i, 3)) for i in range(PREFIX)]
    hub = len(nodes)
    nodes.append(GraphNode(TASK, payload(hub), after=_parents(rng, hub, 2)))
    first = len(nodes)
    batch = group(
        *[Signature(TASK, payload(first + k)) for k in range(FAN)],
        then=Signature(TASK, payload(first + FAN, first_run_seconds=CALLBACK_FIRST_RUN)),
    )
    for node in graph_nodes(batch):
        extra = (rng.randrange(PREFIX),) if not node.after and rng.random() < 0.2 else ()
        placed = tuple(first + i for i in node.after) if node.after else (hub, *extra)
        nodes.append(dataclasses.replace(node, after=tuple(sorted(set(placed)))))
    callback = len(nodes) - 1
    assert nodes[callback].on_dependency_failure == "run" and len(nodes[callback].after) == FAN
    for _ in range(SUFFIX):
        index = len(nodes)
        parents = set(_parents(rng, index, 3))
        if rng.random() < 0.1:
            parents.add(callback)
        nodes.append(GraphNode(TASK, payload(index), after=tuple(sorted(parents))))
    assert len(nodes) == 1000
    return Dag(nodes, hub, range(first, first + FAN), callback)


class Killer:
    """Keeps WORKERS workers running; SIGKILLs one at random moments and starts its replacement at
    once under a new id."""

    def __init__(self, procs: Processes, rng: random.Random) -> None:
        self.procs, self.rng = procs, rng
        self.generation = dict.fromkeys(range(WORKERS), 0)
        self.kills: dict[str, float] = {}  # worker id -> when it was killed (epoch seconds)
        self.exits: dict[str, int] = {}  # worker id -> status, for workers that ended by themselves

    def name(self, slot: int) -> str:
        return f"dag{slot}-{self.generation[slot]}"

    def start(self, slot: int) -> None:
        self.procs.worker(self.name(slot), "--concurrency", str(SLOTS))

    def replace(self, slot: int) -> None:
        self.generation[slot] += 1
        self.start(slot)

    def kill(self, slot: int) -> str:
        name = self.name(slot)
        self.kills[name] = time.time()
        self.procs.kill(name)
        self.replace(slot)
        return name

    def kill_worker(self, worker: str) -> bool:
        for slot in range(WORKERS):
            if self.name(slot) == worker:
                self.kill(slot)
                return True
        return False

    def respawn_exited(self) -> None:
        for slot in range(WORKERS):
            code = self.procs.running[self.name(slot)].poll()
            if code is not None:
                self.exits[self.name(slot)] = code
                self.procs.running.pop(self.name(slot))
                self.replace(slot)


def _counts(ids: list[int]) -> dict[int, int]:
    rows = Job.objects.filter(id__in=ids).values_list("status").order_by()
    counts: dict[int, int] = defaultdict(int)
    for (status,) in rows:
        counts[status] += 1
    return counts


def _callback_running(job_id: int) -> str | None:
    """The worker running the callback, once its run has written its start row."""
    job = Job.objects.filter(id=job_id, status=JobStatus.RUNNING).values("worker_id", "fence").first()
    if job and Ledger.objects.filter(job_id=job_id, fence=job["fence"]).exists():
        return job["worker_id"]
    return None


def _runs(ids: list[int]) -> dict[int, dict[int, Run]]:
    """Per job, per fence: the run's worker, its start and its end (None: it never got there)."""
    found: dict[int, dict[int, dict[str, object]]] = defaultdict(lambda: defaultdict(dict))
    for row in Ledger.objects.filter(job_id__in=ids).order_by("id"):
        worker, phase = row.worker_id.rsplit("|", 1)
        entry = found[row.job_id][row.fence]
        assert phase not in entry, f"job {row.job_id} fence {row.fence} wrote its {phase} twice"
        entry[phase] = row.at
        assert entry.setdefault("worker", worker) == worker, (row.job_id, row.fence)
    return {
        job_id: {
            fence: Run(fence, str(e["worker"]), e.get(START), e.get(END))  # type: ignore[arg-type]
            for fence, e in sorted(fences.items())
        }
        for job_id, fences in found.items()
    }


@pytest.mark.p0
def test_a_random_dag_drains_in_order_through_worker_kills(processes):
    rng = seeded()
    dag = build_dag(rng)
    began = time.time()
    graph = Job.objects.enqueue_graph(dag.nodes, workflow="reliability-dag")
    enqueue_s = time.time() - began
    ids = graph.ids
    index_of = {job_id: i for i, job_id in enumerate(ids)}
    edges = {(ids[i], ids[a]) for i, node in enumerate(dag.nodes) for a in node.after}
    stored = set(Dependency.objects.filter(dependent_id__in=ids).values_list("dependent_id", "dependency_id"))
    assert stored == edges
    assert _counts(ids)[JobStatus.WAITING] == sum(1 for node in dag.nodes if node.after)
    callback_id = ids[dag.callback]

    processes.env = ENV
    processes.start("reaper", "jobq_reap", "--interval", str(REAP_INTERVAL))
    killer = Killer(processes, rng)
    for slot in range(WORKERS):
        killer.start(slot)
    started = time.time()
    callback_killed: str | None = None
    finished = None
    done, last_done, progress_at = 0, -1, time.monotonic()
    next_kill = time.monotonic() + rng.uniform(*KILL_GAP)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and time.monotonic() - progress_at < STALL:
        time.sleep(0.1)
        killer.respawn_exited()
        done = read(lambda: _counts(ids)[JobStatus.DONE])
        if done != last_done:
            last_done, progress_at = done, time.monotonic()
        if done == len(ids):
            finished = time.time()
            break
        if callback_killed is None and (worker := read(lambda: _callback_running(callback_id))):
            assert killer.kill_worker(worker), f"the callback runs on {worker}, not a worker of this test"
            callback_killed = worker
        if time.monotonic() >= next_kill:
            killer.kill(rng.randrange(WORKERS))
            next_kill = time.monotonic() + rng.uniform(*KILL_GAP)
    processes.stop_all()
    counts = _counts(ids)
    assert finished is not None, (
        f"{done} of {len(ids)} jobs DONE after {time.time() - started:.0f} s "
        f"(seed {rng.seed_value}): {dict(counts)}"  # type: ignore[attr-defined]
    )

    jobs = {j.id: j for j in Job.objects.filter(id__in=ids)}
    runs = _runs(ids)
    # Ordering: every run of a dependent, the first included, started after each dependency's DONE.
    early: list[tuple[int, int, str]] = []
    lags: list[float] = []
    for dependent, dependency in edges:
        finished_at = jobs[dependency].finished_at
        last = runs[dependency][jobs[dependency].fence]
        assert finished_at is not None and last.ended is not None
        first_start = min(r.started for r in runs[dependent].values() if r.started is not None)
        if not first_start > finished_at:
            early.append((index_of[dependent], index_of[dependency], f"{first_start} <= {finished_at}"))
        if not first_start > last.ended:
            early.append((index_of[dependent], index_of[dependency], f"{first_start} <= end {last.ended}"))
        lags.append((first_start - finished_at).total_seconds())
    saw_unfinished = {index_of[i]: (j.result or {}).get("unfinished") for i, j in jobs.items()}
    saw_unfinished = {node: seen for node, seen in saw_unfinished.items() if seen != []}
    # The DONE of each job came from its last run, which ended; every earlier run was ended by a kill.
    stale = [index_of[i] for i, j in jobs.items()
             if (j.fence, j.worker_id) != (max(runs[i]), runs[i][max(runs[i])].worker)]  # fmt: skip
    unexplained = [
        (index_of[i], r.fence, r.worker)
        for i, rs in runs.items()
        for r in rs.values()
        if r.fence != jobs[i].fence and r.worker not in killer.kills
    ]
    # The fan-in: one callback job, run after every member's DONE; its DONE from exactly one completed run.
    callback_runs = runs[callback_id]
    completed = [
        r for r in callback_runs.values() if r.ended is not None and r.fence == jobs[callback_id].fence
    ]
    members_done = max(
        jobs[ids[m]].finished_at or dt.datetime.max.replace(tzinfo=dt.UTC) for m in dag.members
    )
    leftover = Dependency.objects.filter(dependent_id__in=ids, resolved=False).count()
    waiting_on = Job.objects.filter(id__in=ids, waiting_on__gt=0).count()
    report(
        "workflow_dag",
        seed=rng.seed_value,  # type: ignore[attr-defined]
        jobs=len(ids), edges=len(edges), workers=WORKERS, slots=SLOTS, lease_s=LEASE,
        enqueue_s=round(enqueue_s, 3),
        kills=len(killer.kills), callback_killed=callback_killed is not None, self_exits=len(killer.exits),
        run_more_than_once=sum(1 for rs in runs.values() if len(rs) > 1),
        extra_runs=sum(len(rs) - 1 for rs in runs.values()),
        callback_runs=len(callback_runs),
        dependency_done_to_dependent_start_s=spread(lags),
        early_starts=len(early), unexplained_reruns=len(unexplained),
        seconds=round(finished - started, 1),
    )  # fmt: skip
    assert {JobStatus(j.status).name for j in jobs.values()} == {"DONE"}
    assert set(runs) == set(ids)
    assert early == [], f"dependents started before their dependency was DONE: {early[:20]}"
    assert saw_unfinished == {}, f"runs that found a dependency unfinished: {saw_unfinished}"
    assert counts[JobStatus.WAITING] == 0 and waiting_on == 0 and leftover == 0
    assert stale == [], f"DONE written by a run other than the job's last: {stale[:20]}"
    assert unexplained == [], f"runs repeated with no kill of their worker: {unexplained[:20]}"
    assert Job.objects.filter(workflow_id=graph.workflow_id).count() == len(ids)
    first_run = callback_runs[min(callback_runs)]  # it lingered: killed mid-run, on purpose or at random
    assert first_run.worker in killer.kills and first_run.ended is None, first_run
    assert len(completed) == 1 and completed[0].worker == jobs[callback_id].worker_id
    assert min(r.started for r in callback_runs.values() if r.started) > members_done
    assert len(killer.kills) > 1, "no worker was killed at random"
