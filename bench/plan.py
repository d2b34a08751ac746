"""The workloads (W1-W7) and which systems each one measures."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from bench.common import RL_DRAIN_RATE, Sizes
from bench.fairness import CLAIM_BATCH, FAIR
from bench.systems import System


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    key: str  # "W2 c4"
    group: str  # "W2", for --workloads
    title: str  # what it measures, for the output
    op: str  # bench.child operation
    params: dict[str, Any]
    applies: Callable[[type[System]], bool]
    skip_reason: str = ""  # why systems it does not apply to show "—"
    max_runs: int | None = None  # at most this many runs, whatever --runs says (None: --runs)
    # A workload run just before each run of this one, on the same system and database: its rate is
    # kept with the run (reference_rate), and the row is held against it, a figure of the same minute
    # rather than the median of that workload's own runs, taken minutes apart.
    paired: str | None = None
    # Which system's run of ``paired`` precedes each system's run, when not its own: only the systems
    # named here are paired (PAIRED_ON).
    paired_on: dict[str, str] | None = None

    def paired_system(self, system: str) -> str | None:
        """The system whose run of ``paired`` precedes ``system``'s each run; None: not paired."""
        if self.paired is None:
            return None
        return system if self.paired_on is None else self.paired_on.get(system)


def _queues(cls: type[System]) -> bool:
    return cls.name not in ("psycopg", DJANGO_TASKS_COLUMN)


# django-jobq through Django's Tasks API: measured where it is held against native jobq (W1 single,
# W2 c4, W3), not in the workloads that measure the queue itself.
DJANGO_TASKS_COLUMN = "jobq_tasks"
# W3's floor: plain psycopg's wake-up (bench.systems.psycopg_ceiling), the W3 column django-jobq's
# latencies are held against.
FLOOR = "psycopg"
# The drain the flow-control, table-growth and fair-queue rows are held against, run before each of
# their runs (Workload.paired): W2 c4's rate moves by a quarter from one minute to the next.
PAIRED = "W2 c4"
# Rows of another system held against django-jobq's own run of the same minute: Django's Tasks API's W2
# c4 is run just after a native W2 c4, and held against it.
PAIRED_ON = {DJANGO_TASKS_COLUMN: "jobq"}
# W7 (many producers) is about NOTIFY's cost: django-jobq, plain INSERTs, and two peers that notify on
# every insert.
W7_SYSTEMS = ("jobq", "psycopg", "pgqueuer", "procrastinate")


def workloads(s: Sizes) -> list[Workload]:
    """In the order they run: W5 last, since its million-row insert leaves WAL and dirty pages behind."""
    drain = {"jobs": s.drain_jobs, "kind": "noop", "deadline": s.deadline}
    out = [
        Workload(
            key="W1 single",
            group="W1",
            title=f"enqueue {s.enqueue_jobs:,} jobs, one call (one transaction) each, jobs/s",
            op="enqueue_single",
            params={"jobs": s.enqueue_jobs, "deadline": s.deadline},
            applies=lambda cls: True,
        ),
        Workload(
            key="W1 keyed",
            group="W1",
            title=f"enqueue {s.enqueue_jobs:,} jobs, one call each, every job with its own dedupe key, jobs/s",
            op="enqueue_single",
            params={"jobs": s.enqueue_jobs, "deadline": s.deadline, "keyed": True},
            applies=lambda cls: cls.name == "jobq",
        ),
        Workload(
            key="W1 bulk",
            group="W1",
            title=f"enqueue {s.enqueue_jobs:,} jobs in one call of the bulk API (psycopg: COPY), jobs/s",
            op="enqueue_bulk",
            params={"jobs": s.enqueue_jobs},
            applies=lambda cls: cls.bulk_api is not None,
            skip_reason="no bulk enqueue API",
        ),
        Workload(
            key="W1 executemany",
            group="W1",
            title=f"enqueue {s.enqueue_jobs:,} jobs with psycopg executemany in one transaction, jobs/s",
            op="enqueue_bulk",
            params={"jobs": s.enqueue_jobs, "executemany": True},
            applies=lambda cls: cls.name == "psycopg",
        ),
    ]
    out.append(
        Workload(
            key=f"W7 p{s.producers}",
            group="W7",
            title=f"enqueue from {s.producers} processes at once, single calls (one transaction each) for "
            f"{s.producer_seconds:g} s, no worker running, jobs/s",
            op="enqueue_parallel",
            params={"producers": s.producers, "seconds": s.producer_seconds},
            applies=lambda cls: cls.name in W7_SYSTEMS,
            skip_reason="measured for django-jobq, the ceiling and the peers that notify per insert",
        )
    )
    flow = {"jobs": s.enqueue_jobs, "deadline": s.deadline, "pending": s.backlog_jobs}
    out += [
        Workload(
            key="FC backlog",
            group="FC",
            title=f"W1 single with a {s.backlog_jobs:,}-job PENDING backlog in the queue, jobs/s",
            op="enqueue_single",
            params=flow,
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's flow control",
        ),
        Workload(
            key="FC depth",
            group="FC",
            title="FC backlog, the queue with a MAX_DEPTH of 1,000,000, jobs/s",
            op="enqueue_single",
            params={**flow, "jobq": {"QUEUES": {"default": {"MAX_DEPTH": 1_000_000}}}},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's flow control",
        ),
    ]
    for batch in s.ceiling_batches:
        out.append(
            Workload(
                key=f"W4 b{batch}",
                group="W4",
                title=f"plain psycopg claim/finish, {s.ceiling_processes} processes, batch {batch}, "
                f"{s.ceiling_jobs:,} jobs, jobs/s",
                op="ceiling",
                params={"jobs": s.ceiling_jobs, "batch": batch, "processes": s.ceiling_processes},
                applies=lambda cls: cls.name == "psycopg",
            )
        )
    for concurrency in s.drain_concurrency:
        out.append(
            Workload(
                key=f"W2 c{concurrency}",
                group="W2",
                title=f"drain {s.drain_jobs:,} no-op jobs, total concurrency {concurrency}, jobs/s",
                op="drain",
                params={**drain, "concurrency": concurrency},
                applies=lambda cls, c=concurrency: (
                    _queues(cls) or (cls.name == DJANGO_TASKS_COLUMN and c == 4)
                ),
                paired=PAIRED if concurrency == 4 else None,
                paired_on=PAIRED_ON,
            )
        )
    other_queues = {"QUEUES": {"mail": {"MAX_RUNNING": 2, "RATE_LIMIT": "10/s"}, "bulk": {"MAX_DEPTH": 1000}}}
    out += [
        Workload(
            key="FC others capped",
            group="FC",
            title="W2 c4, with MAX_RUNNING, RATE_LIMIT and MAX_DEPTH set on other queues, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "jobq": other_queues},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's flow control",
            paired=PAIRED,
        ),
        Workload(
            key="FC capped",
            group="FC",
            title="W2 c4 on a queue with MAX_RUNNING 4, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "jobq": {"QUEUES": {"default": {"MAX_RUNNING": 4}}}},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's flow control",
            paired=PAIRED,
        ),
        Workload(
            key="FC task capped",
            group="FC",
            title="W2 c4 of a task with @task(max_running=4) (bench.noop_capped), jobs/s",
            op="drain",
            params={**drain, "kind": "noop_capped", "concurrency": 4},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's flow control",
            paired=PAIRED,
        ),
        Workload(
            key="W3",
            group="W3",
            title=f"idle workers (concurrency {s.latency_concurrency}); {s.latency_jobs} jobs enqueued "
            f"{s.latency_gap * 1000:g} ms apart; enqueue call -> function start, ms. Plain psycopg is "
            "the floor: INSERT + NOTIFY in one statement, one process waiting on LISTEN (select), "
            "W4's SKIP LOCKED claim, time noted as the row comes back",
            op="latency",
            params={"jobs": s.latency_jobs, "gap": s.latency_gap, "concurrency": s.latency_concurrency},
            applies=lambda cls: _queues(cls) or cls.name in (DJANGO_TASKS_COLUMN, FLOOR),
        ),
        Workload(
            key=f"W6 c{s.sleep_concurrency}",
            group="W6",
            title=f"drain {s.sleep_jobs:,} jobs that sleep {s.sleep_seconds * 1000:g} ms, concurrency "
            f"{s.sleep_concurrency}, jobs/s (ideal {s.sleep_concurrency / s.sleep_seconds:,.0f})",
            op="drain",
            params={
                "jobs": s.sleep_jobs,
                "kind": "sleep",
                "deadline": s.deadline,
                "concurrency": s.sleep_concurrency,
                "sleep_seconds": s.sleep_seconds,
            },
            applies=lambda cls: _queues(cls) and cls.bounded,
            skip_reason="runs without a concurrency limit",
        ),
        Workload(
            key="W5 history",
            group="W5",
            title=f"W2 (concurrency 4) with {s.history_rows:,} DONE rows in the table, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "history": s.history_rows},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's own table growth",
            paired=PAIRED,
        ),
        Workload(
            key="W5 backlog",
            group="W5",
            title=f"W2 (concurrency 4) with a {s.backlog_jobs:,}-job PENDING backlog, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "backlog": s.backlog_jobs},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's own table growth",
            paired=PAIRED,
        ),
        # Last of the drains: its load (about 2.6 GB at 10,000,000 rows) takes a minute or two, so
        # it runs once whatever --runs says.
        Workload(
            key="W5 history 10M",
            group="W5",
            title=f"W2 (concurrency 4) with {s.big_history_rows:,} DONE rows in the table, one run, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "history": s.big_history_rows},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's own table growth",
            max_runs=1,
            paired=PAIRED,
        ),
    ]
    for key, limiter, threads, keys, what in [
        ("RL c1", "grant", 1, "one", "TokenBucket.acquire, every call granted, 1 thread"),
        ("RL c8", "grant", s.rl_threads, "one", f"the same, {s.rl_threads} threads on one key"),
        ("RL c8 keys", "grant", s.rl_threads, "each", f"the same, {s.rl_threads} threads, a key each"),
        ("RL refused c1", "refuse", 1, "one", "TokenBucket.acquire, every call refused, 1 thread"),
        ("RL window c1", "window", 1, "one", "SlidingWindow(10,000 per 1 s).acquire, granted, 1 thread"),
    ]:
        out.append(
            Workload(
                key=key.replace("c8", f"c{s.rl_threads}"),
                group="RL",
                title=f"{what}, for {s.rl_seconds:g} s, calls/s",
                op="rate_limit",
                params={"limiter": limiter, "threads": threads, "keys": keys, "seconds": s.rl_seconds},
                applies=lambda cls: cls.name == "jobq",
                skip_reason="measures django-jobq's own rate-limit primitive",
            )
        )
    # A drain under a rate limit: how close to its limit it runs, and how many claims each run costs
    # (a claim that finds no permit gives the job back: a wasted claim and two dead row versions).
    limit = f"{RL_DRAIN_RATE}/s"
    for key, what, extra in [
        ("RL drain", f'a queue with RATE_LIMIT "{limit}"', {"jobq": {"QUEUES": {"default": {"RATE_LIMIT": limit}}}}),
        ("RL drain task", f'a task with rate_limit="{limit}"', {"task_rate": limit}),
    ]:  # fmt: skip
        out.append(
            Workload(
                key=key,
                group="RL",
                title=f"drain {s.rl_drain_jobs:,} due no-op jobs of {what}, concurrency 4: jobs/s once the "
                f"bucket's first {RL_DRAIN_RATE} permits are spent, and claims per run",
                op="rate_drain",
                params={"jobs": s.rl_drain_jobs, "rate": RL_DRAIN_RATE, "concurrency": 4, **extra},
                applies=lambda cls: cls.name == "jobq",
                skip_reason="measures django-jobq's rate-limited claims",
            )
        )
    # Fair queues: W2 c4 with its jobs spread over keys, and the claim's latency as the backlog grows.
    backlogs = ", ".join(f"{b:,}" for b in s.fair_backlogs)
    out += [
        Workload(
            key="fair drain",
            group="FQ",
            title=f"W2 c4 in a fair queue (FAIR: True), the jobs over {s.fair_drain_keys:,} keys, jobs/s",
            op="drain",
            params={**drain, "concurrency": 4, "fair_keys": s.fair_drain_keys, "jobq": FAIR},
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's fair queues",
            paired=PAIRED,
        ),
        Workload(
            key="fair claim p99",
            group="FQ",
            title=f"claim_batch({CLAIM_BATCH}) of a fair queue, {s.fair_claims:,} calls one after another, "
            f"with {backlogs} due jobs over {s.fair_claim_keys:,} keys, p99 ms",
            op="fair_claim",
            params={
                "backlogs": list(s.fair_backlogs),
                "keys": s.fair_claim_keys,
                "claims": s.fair_claims,
                "jobq": FAIR,
            },
            applies=lambda cls: cls.name == "jobq",
            skip_reason="measures django-jobq's fair queues",
        ),
    ]
    return out


GROUPS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "FC", "RL", "FQ")
