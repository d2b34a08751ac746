import os
import time

import django_jobq
from bench import work


@django_jobq.task(name="bench.noop")
def noop() -> None:
    work.noop()


if os.environ.get("BENCH_TASK_CAPS") == "1":  # set by bench.child for FC task capped only

    @django_jobq.task(name="bench.noop_capped", max_running=4)
    def noop_capped() -> None:
        """FC task capped: the no-op under a task cap (at most 4 RUNNING at once, across workers). Only
        registered for that workload: a worker that knows a capped task takes every claim under the
        caps' locks, which would slow the other workloads' drains too."""
        work.noop()


if os.environ.get("BENCH_TASK_RATE"):  # set by bench.child for RL drain task only

    @django_jobq.task(name="bench.noop_limited", rate_limit=os.environ["BENCH_TASK_RATE"])
    def noop_limited() -> None:
        """RL drain task: the no-op under a task rate limit (across workers)."""
        work.noop()


@django_jobq.task(name="bench.sleep")
def sleep() -> None:
    work.sleep()


@django_jobq.task(name="bench.latency")
def latency(key: int) -> None:
    work.record_start(key)


@django_jobq.task(name="bench.spin")
def spin(loops: int) -> int:
    return work.spin(loops)


# bench.batches: work with a fixed cost per call and a small one per job (a provider's batch API)
CALL_SECONDS, PER_JOB_SECONDS = 0.005, 0.0001


@django_jobq.task(name="bench.call_cost")
def call_cost() -> None:
    time.sleep(CALL_SECONDS + PER_JOB_SECONDS)


@django_jobq.task(name="bench.call_cost_batch", batch=django_jobq.Batch(size=100, wait=0.05))
def call_cost_batch(jobs: list[django_jobq.BatchJob]) -> None:
    time.sleep(CALL_SECONDS + PER_JOB_SECONDS * len(jobs))
