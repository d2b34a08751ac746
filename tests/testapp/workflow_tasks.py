"""Tasks of the workflow reliability test (tests/reliability/test_workflow_dag.py)."""

import time

import django_jobq

from .models import Ledger

START, END = "start", "end"  # the end of worker_id in a run's two Ledger rows


def ledger_worker(worker_id: str, phase: str) -> str:
    """The Ledger's worker_id column for one phase of a run: "<worker>|start" or "<worker>|end"."""
    return f"{worker_id}|{phase}"


@django_jobq.task(name="test.dag_node", takes_context=True, max_attempts=100)
def dag_node(context, node: int, ms: int = 0, first_run_seconds: float = 0.0):
    """One node of a workflow DAG: a ledger row as the run starts (database clock), the dependencies it
    found unfinished, ``ms`` milliseconds of work (the job's first run to start takes
    ``first_run_seconds`` more), and a ledger row as the run ends."""
    Ledger.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence,
        worker_id=ledger_worker(context.worker_id, START),
    )  # fmt: skip
    unfinished = [r.job_id for r in context.dependency_results() if r.status != "DONE"]
    if (
        first_run_seconds
        and Ledger.objects.filter(job_id=context.job_id, worker_id__endswith=START).count() == 1
    ):
        time.sleep(first_run_seconds)
    time.sleep(ms / 1000)
    Ledger.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence,
        worker_id=ledger_worker(context.worker_id, END),
    )  # fmt: skip
    return {"node": node, "fence": context.fence, "unfinished": unfinished}
